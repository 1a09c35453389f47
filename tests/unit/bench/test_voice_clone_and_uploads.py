"""The voice-clone trace, its repeated-voice figures and the upload-stall gaps."""

from __future__ import annotations

from gateway.bench.client import RequestResult
from gateway.bench.scenarios import repeated_voice_stats
from gateway.bench.upload_stall import _gaps
from gateway.bench.voice_clone import PUBLISHED_CLIPS_S, clip_lengths, clip_wav, section
from gateway.bench.workload import voice_clone
from gateway.types import SlaClass


def test_the_voice_clone_trace_is_seeded_and_uses_every_voice_index() -> None:
    arrivals = voice_clone(5.0, 60.0, seed=3, voices=4)
    assert arrivals == voice_clone(5.0, 60.0, seed=3, voices=4)
    assert {a.voice for a in arrivals} == {0, 1, 2, 3}
    assert all(a.sla_class is SlaClass.LATENCY for a in arrivals)


def test_each_voice_has_its_own_clip() -> None:
    assert clip_wav(0, 1.0) != clip_wav(1, 1.0)
    assert clip_wav(0, 1.0)[:4] == b"RIFF"


def test_clips_are_as_long_as_the_published_prompts_unless_one_length_is_asked() -> None:
    lengths = clip_lengths(40, 0.0)
    assert lengths[:16] == list(PUBLISHED_CLIPS_S) and lengths[16:32] == list(PUBLISHED_CLIPS_S)
    assert 11 < sum(PUBLISHED_CLIPS_S) / len(PUBLISHED_CLIPS_S) < 13
    assert clip_lengths(3, 6.0) == [6.0, 6.0, 6.0]


def test_the_section_names_the_clips_it_used() -> None:
    published = clone_document("affinity", 81, 19, 0.280)
    published["params"].update(clips="published", clip_s=12.66)
    assert "clips as long as Higgs Audio's 16 published voice prompts, 12.66 s mean" in "\n".join(section([published]))
    assert "(6 s clips)" in "\n".join(section([clone_document("affinity", 81, 19, 0.280)]))


def result(voice: str, sent_s: float, ttfp_s: float) -> RequestResult:
    return RequestResult(None, 10, sent_s, status=200, ttfp_s=ttfp_s, pcm_bytes=10, voice=voice)


def test_repeated_voices_are_those_used_earlier_in_the_trace() -> None:
    results = [result("b", 2.0, 0.02), result("a", 0.0, 0.05), result("a", 1.0, 0.01), result("a", 3.0, 0.03)]
    stats = repeated_voice_stats(results, time_scale=0.1)
    assert stats["first"]["count"] == 2 and stats["repeated"]["count"] == 2
    assert abs(stats["repeated"]["ttfp_p50_s"] - 0.2) < 1e-9  # modelled: (0.1 + 0.3) / 2
    assert abs(stats["first"]["ttfp_p50_s"] - 0.35) < 1e-9
    assert abs(stats["repeated"]["ttfp_mean_s"] - 0.2) < 1e-9


def clone_document(label: str, hits: int, misses: int, mean_s: float) -> dict:
    repeated = {"count": 90, "ttfp_mean_s": mean_s, "ttfp_p10_s": 0.25, "ttfp_p50_s": mean_s, "ttfp_p90_s": 0.4}
    phase = {"sent": 100, "errors": {}, "e2e_s": {"median": 3.0}, "audio_s_per_s": 24.0,
             "repeated_voices": {"repeated": repeated, "first": {"count": 10, "ttfp_p50_s": 0.4}},
             "reference_code_cache": {"worker1": {"hits": hits, "misses": misses}}}  # fmt: skip
    params = {"kind": "voice_clone", "duration_s": 60, "rate": 1.5, "voices": 20, "clip_s": 6.0}
    notes = {"emulator_timing": {"ref_audio_encode_ms_per_second": "6.0"}}
    return {"mode": "trace", "label": f"voice-clone {label}", "params": params, "notes": notes, "phases": [phase]}


def test_the_section_says_how_many_repeats_hit_and_what_that_is_worth() -> None:
    # 10 first uses, all misses: 81 of the 90 repeats hit with affinity, 45 without.
    text = "\n".join(section([clone_document("affinity", 81, 19, 0.280), clone_document("no-affinity", 45, 55, 0.300)]))
    assert "| 90% |" in text and "| 50% |" in text
    assert "40% more of the repeated requests hitting is worth 14 ms of mean TTFP" in text
    assert "the mean is 20 ms lower with affinity" in text


def test_chunk_gaps_during_and_before_the_uploads() -> None:
    stream = RequestResult(None, 10, 0.0, status=200)
    stream.chunks = [(0.1, 1), (0.2, 1), (0.25, 1), (0.9, 1), (1.0, 1)]  # a 0.65 s pause at 0.25-0.9
    untouched = RequestResult(None, 10, 2.0, status=200)
    untouched.chunks = [(0.1, 1), (0.2, 1)]
    during, before = _gaps([stream, untouched], begin=0.5, end=0.8)
    assert [round(g, 2) for g in during] == [0.65] and [round(g, 2) for g in before] == [0.1]
