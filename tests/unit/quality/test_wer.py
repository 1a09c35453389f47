"""A word error rate against the input text: normalisation, the rate, PocketSphinx on the
emulator's voice, the transcriber's child process and its bound, the judge's WER window, and
what start-up says without the recogniser extra."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from gateway.config import ConfigError, GatewayConfig, QualityConfig
from gateway.config_check import wer_findings
from gateway.emulator.faults import Faults
from gateway.emulator.spoken import SpeechAudio
from gateway.quality import recogniser as recogniser_module
from gateway.quality.judge import QualityJudge
from gateway.quality.metrics import QualityMetrics
from gateway.quality.recogniser import Recogniser, missing_extra, model_files, to_16k
from gateway.quality.sampler import QualitySampler, Sample
from gateway.quality.score import Floors, Score
from gateway.quality.transcriber import Transcriber, Transcript
from gateway.quality.wer import WordErrors, normalise, spell, word_errors
from gateway.types import PoolName, WorkerState
from tests.unit.quality.fakes import FakeWorker

pytest.importorskip("pocketsphinx")
pytest.importorskip("jiwer")

TEXT = QualityConfig().probe_text  # "The quick brown fox jumps over the lazy dog, and then it runs back home again."
CHUNK = 48000  # one second of the workers' PCM


def render(text: str) -> bytes:
    async def go() -> bytes:
        clip = SpeechAudio().clip(text, int(24000 * len(text) / 14), 42, None)  # ~14 characters a second
        await clip.ready(clip.total_samples)
        return clip.pcm(0, clip.total_samples)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def speech() -> bytes:
    return render(TEXT)


def chunks(pcm: bytes) -> list[bytes]:
    return [pcm[i : i + CHUNK] for i in range(0, len(pcm), CHUNK)]


def sample(text: str | None = TEXT, at: float = 1.0, load: int = 4) -> Sample:
    return Sample("low_latency-0", PoolName.LOW_LATENCY, load, at, len(text or ""), text=text)


# ---- normalisation and the rate -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("The quick brown fox.", "the quick brown fox"),
        ("Hello, World!  It's fine;   really?", "hello world it's fine really"),
        ("\u2018Don\u2019t\u2019 stop", "don't stop"),
        ("well-known and/or self_made", "well known and or self made"),
        ("[laugh] Yes <break time='1s'/> no", "yes no"),
        ("42 cats & 50% of 1,999 dogs", "forty two cats and fifty percent of one thousand nine hundred ninety nine dogs"),
        ("2.5 metres, 007, 1000000", "two point five metres zero zero seven one million"),
        ("CAFÉ ﬁne", "café fine"),  # NFKC folds the ligature
        ("...!?", ""),
    ],
)
def test_normalise_writes_what_a_recogniser_would(text: str, words: str) -> None:
    assert normalise(text) == words


def test_spell_reads_numbers_as_a_speaker_does() -> None:
    assert spell(0) == "zero" and spell(13) == "thirteen" and spell(90) == "ninety"
    assert spell(101) == "one hundred one"
    assert spell(2026) == "two thousand twenty six"
    assert spell(3_000_017) == "three million seventeen"


def test_word_error_rates() -> None:
    same = word_errors("The quick brown fox.", "the quick brown fox")
    assert same == WordErrors(0.0, 4, 4, 0, 0, 0)
    one = word_errors("the quick brown fox", "the quick brown box")
    assert one is not None and one.wer == 0.25 and one.substitutions == 1
    dropped = word_errors("the quick brown fox", "the fox")
    assert dropped is not None and dropped.wer == 0.5 and dropped.deletions == 2
    extra = word_errors("yes", "yes yes yes")
    assert extra is not None and extra.wer == 2.0 and extra.insertions == 2  # insertions can pass 1.0
    nothing = word_errors("the quick brown fox", "")
    assert nothing == WordErrors(1.0, 4, 0, 0, 4, 0)
    assert word_errors("[laugh] ...", "hello") is None  # no word to say: nothing to measure
    numbers = word_errors("I have 42 cats", "i have forty two cats")
    assert numbers is not None and numbers.wer == 0.0


# ---- the recogniser, from what its package ships -------------------------------------------


def test_the_model_is_the_one_the_wheel_ships() -> None:
    import pocketsphinx

    files = model_files()
    assert set(files) == {"hmm", "lm", "dict"}
    assert all(path.startswith(pocketsphinx.get_model_path()) for path in files.values())
    assert missing_extra() is None


def test_resampling_to_16k_keeps_the_duration() -> None:
    pcm = (3000 * np.sin(2 * np.pi * 200 * np.arange(24000) / 24000)).astype("<i2").tobytes()
    out = to_16k(pcm + b"\x01")  # an odd trailing byte is dropped
    assert abs(len(out) // 2 - 16000) <= 32
    assert to_16k(b"") == b""


def test_clean_emulator_speech_is_heard_and_noise_is_not(speech: bytes) -> None:
    recogniser = Recogniser()
    started = time.process_time()
    heard = recogniser.transcribe(speech)
    cpu_per_audio_s = (time.process_time() - started) / (len(speech) / CHUNK)
    clean = word_errors(TEXT, heard)
    assert clean is not None
    # PocketSphinx's general US English model on eSpeak's voice: most words, not all (0.15-0.65
    # measured over texts); "brown fox", "lazy dog" and "home" are what it reliably hears.
    assert clean.wer <= 0.7, heard
    assert {"brown", "fox", "lazy", "dog"} <= set(heard.split()), heard
    noise = np.random.default_rng(1).normal(0, 3000, 24000 * 3).astype("<i2").tobytes()
    noisy = word_errors(TEXT, recogniser.transcribe(noise))
    assert noisy is not None and noisy.wer >= 0.9 and noisy.wer - clean.wer >= 0.3
    assert cpu_per_audio_s < 5.0  # about 0.3-0.6 CPU seconds per second of clean speech


# ---- the transcriber: a child process, a bounded queue ---------------------------------------


async def wait_for(predicate, seconds: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_the_transcriber_hears_in_its_child_drops_past_max_pending_and_counts(speech: bytes) -> None:
    heard: list[tuple[Sample, Transcript]] = []
    dropped: list[int] = []
    transcriber = Transcriber(2, deliver=lambda s, t: heard.append((s, t)), on_dropped=lambda: dropped.append(1))
    assert not transcriber.submit(sample(), chunks(speech))  # not started: nothing taken
    transcriber.start()
    try:
        noisy = Faults(noisy_from=1).degrade(speech, 1, 0)
        # Submitted in one go (no await between): the first two are in the child's hands, so
        # the next two are dropped and counted, whatever the child's speed.
        assert transcriber.submit(sample(load=1), chunks(speech))
        assert transcriber.submit(sample(load=9), chunks(noisy))
        assert not transcriber.submit(sample(), chunks(speech))
        assert not transcriber.submit(sample(), chunks(speech))
        assert not transcriber.submit(sample(text=None), chunks(speech))  # no text: not a WER sample, not a drop
        assert dropped == [1, 1] and transcriber.pending == 2
        await wait_for(lambda: len(heard) == 2, 120)
        assert transcriber.pending == 0
        by_load = {s.load: t for s, t in heard}
        clean, bad = by_load[1], by_load[9]
        assert clean.errors is not None and bad.errors is not None
        assert clean.errors.wer <= 0.7 and bad.errors.wer >= 0.9
        assert abs(clean.audio_s - len(speech) / CHUNK) < 0.01 and clean.cpu_s > 0
        # Room again once they are done; and a re-test's clip is waited for, never dropped.
        direct = await asyncio.wait_for(transcriber.transcribe(chunks(speech), TEXT), 120)
        assert direct is not None and direct.errors is not None and direct.errors.wer == clean.errors.wer
    finally:
        await transcriber.stop()
    assert not transcriber.running and await transcriber.transcribe([b"\x00\x00"], TEXT) is None


async def test_the_event_loop_keeps_ticking_while_the_child_decodes(speech: bytes) -> None:
    """Recognition holds the interpreter for CPU seconds; in the child it never holds ours.
    Counted, not timed: the loop must get through many sleeps while one clip is decoded."""
    heard: list[Transcript] = []
    transcriber = Transcriber(1, deliver=lambda _s, t: heard.append(t), on_dropped=lambda: None)
    transcriber.start()
    try:
        await asyncio.wait_for(transcriber.transcribe([b"\x00\x00" * 1600], TEXT), 120)  # loaded
        assert transcriber.submit(sample(), chunks(speech))
        ticks = 0
        while not heard:
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks >= 20  # decoding takes a second or more of CPU; the loop ran all along
    finally:
        await transcriber.stop()


def _dies_before_loading(jobs: object, results: object) -> None:
    raise SystemExit(3)


async def test_a_child_that_cannot_load_leaves_the_rate_off() -> None:
    transcriber = Transcriber(2, deliver=lambda _s, _t: None, on_dropped=lambda: None, target=_dies_before_loading)
    transcriber.start()
    try:
        await wait_for(lambda: not transcriber.running, 60)
        assert not transcriber.submit(sample(), [b"\x00\x00"])
    finally:
        await transcriber.stop()


# ---- sampling: a share of the scored streams keeps its text ---------------------------------


async def test_a_share_of_the_sampled_streams_goes_to_the_transcriber_with_its_text() -> None:
    sent: list[Sample] = []
    sampler = QualitySampler(
        0.5, min_seconds=0.0, max_seconds=1.0, max_pending=8, deliver=lambda _s, _score: None, on_dropped=lambda: None,
        wer_share=0.5, transcribe=lambda s, _chunks: sent.append(s),
    )  # fmt: skip
    sampler.start()
    try:
        taps = [sampler.tap("w", PoolName.LOW_LATENCY, 1, 0.0, f"text {i}") for i in range(8)]
        kept = [t for t in taps if t is not None]
        assert len(kept) == 4  # every other stream scored ...
        assert [t._sample.text for t in kept] == ["text 0", None, "text 4", None]  # ... every other of those heard
        for tap in kept:
            tap.add(b"\x00\x10" * 1000)
            tap.finished(completed=True, peak_load=3)
        long = sampler.tap("x", PoolName.LOW_LATENCY, 1, 0.0, "a long text")
        assert long is not None and long._sample.text == "a long text"
        long.add(b"\x00\x10" * 30000)  # past max_seconds: cut, so the text says more than the clip
        long.finished(completed=True, peak_load=1)
    finally:
        await sampler.stop()
    assert [s.text for s in sent] == ["text 0", "text 4"] and all(s.load == 3 for s in sent)


# ---- the judge: a WER window per worker, ejected above max_wer ------------------------------


def transcript(wer: float) -> Transcript:
    return Transcript(WordErrors(wer, 10, 10, round(wer * 10), 0, 0), 4.0, 1.2)


def test_a_worker_whose_mean_wer_over_its_window_exceeds_max_wer_is_ejected_with_the_evidence() -> None:
    worker, ejected, registry = FakeWorker("low_latency-0"), [], CollectorRegistry()

    def eject(w: FakeWorker, detail: str) -> None:  # type: ignore[override]
        ejected.append(detail)
        w.state, w.state_since = WorkerState.EJECTED, 9.0

    judge = QualityJudge(
        Floors(), 8, 3, worker=lambda _id: worker, eject=eject,  # type: ignore[arg-type]
        metrics=QualityMetrics(registry), clock=lambda: 9.0, max_wer=0.6, wer_window=4,
    )  # fmt: skip
    for wer in (0.3, 0.9, 1.0):
        judge.judge_wer(sample(), transcript(wer))
    assert ejected == []  # the window is not full yet
    assert worker.quality is not None and worker.quality["wer"]["window"] == 3  # type: ignore[index]
    assert judge.judge_wer(sample(load=12), transcript(0.9)) == pytest.approx(0.775)
    assert len(ejected) == 1 and "mean word error rate 0.78 over its last 4" in ejected[0] and "max_wer 0.6" in ejected[0]
    evidence = worker.quality["ejection"]["evidence"]  # type: ignore[index]
    assert [e["wer"] for e in evidence] == [0.3, 0.9, 1.0, 0.9] and evidence[-1]["batch"] == 12
    assert "text" not in str(evidence)  # numbers only: the texts are the users'
    assert judge.ejected["low_latency-0"] == (9.0, 12) and "low_latency-0" in judge.wer_ejected
    assert registry.get_sample_value("higgs_gateway_quality_wer_count", {"pool": "low_latency", "worker": "low_latency-0"}) == 4
    assert registry.get_sample_value("higgs_gateway_quality_wer_cpu_seconds_total") == pytest.approx(4.8)
    # The signal checks' record keeps the WER window (judge() rewrites the rest).
    judge.judge(sample(), Score(3.0, 12.0, 0.0, 0.05, -20.0))
    assert "wer" in worker.quality and "ejection" in worker.quality
    assert judge.wer_passes([transcript(0.2), transcript(0.5)]) == (True, pytest.approx(0.35))
    assert judge.wer_passes([transcript(0.2), None]) == (False, None)  # a clip not heard is no pass


def test_without_max_wer_the_rate_is_measured_and_never_ejects() -> None:
    worker, ejected = FakeWorker("low_latency-0"), []
    judge = QualityJudge(
        Floors(), 8, 3, worker=lambda _id: worker, eject=lambda w, d: ejected.append(d),  # type: ignore[arg-type, misc]
        metrics=QualityMetrics(CollectorRegistry()), clock=lambda: 0.0, wer_window=2,
    )  # fmt: skip
    for _ in range(5):
        judge.judge_wer(sample(), transcript(1.0))
    assert ejected == [] and worker.quality is not None and worker.quality["wer"]["mean"] == 1.0  # type: ignore[index]
    assert judge.judge_wer(sample(), Transcript(None, 1.0, 0.1)) is None  # no word in the text


# ---- without the extra: start-up says so -----------------------------------------------------


def test_enabled_without_the_extra_is_a_config_error_in_check_and_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    config = GatewayConfig.model_validate({"quality": {"wer": {"enabled": True}}})
    assert wer_findings(config) == []  # installed here
    real = recogniser_module.importlib.util.find_spec
    monkeypatch.setattr(
        recogniser_module.importlib.util, "find_spec", lambda name: None if name == "pocketsphinx" else real(name)
    )
    reason = missing_extra()
    assert reason is not None and "pocketsphinx" in reason and "higgs-gateway[recogniser]" in reason
    findings = wer_findings(config)
    assert len(findings) == 1 and findings[0].key == "quality.wer.enabled"
    assert wer_findings(GatewayConfig.model_validate({})) == []  # off by default: nothing to check

    from gateway.quality.service import QualityService

    with pytest.raises(ConfigError, match="recogniser"):
        QualityService(
            config.quality, CollectorRegistry(), None, _NoHealth(), httpx.AsyncClient(), "m", 1.0, time.monotonic,  # type: ignore[arg-type]
        )  # fmt: skip


class _NoHealth:
    def set_readmission_gate(self, gate: object) -> None:
        pass
