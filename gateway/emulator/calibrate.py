"""Run the timing model against the published figures, on a virtual clock.

    higgs-gateway emulator calibrate [--requests-per-client N]

Closed-loop clients (each sends its next request when the last one's audio is complete,
like vllm-omni's own benchmark) drive one emulated engine per profile and concurrency.
No sockets and no sleeping: a full sweep takes about a second. The unit tests hold the
model to the same table (``tests/unit/emulator/test_calibration.py``).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.worker.profile import DeployProfile, load_deploy_profile
from gateway.emulator.clock import VirtualClock
from gateway.emulator.engine import Engine, EngineRequest
from gateway.help_format import HelpFormatter
from gateway.worker.timing import StepModel, TimingParams

LOW_LATENCY = "higgs_multimodal_qwen3_low_latency.yaml"
HIGH_THROUGHPUT = "higgs_multimodal_qwen3_high_throughput.yaml"

# Short English prompts in the style of the seed-tts English test set (Common Voice
# sentences, about 4-5 s of speech each), which the published sweeps use.
CALIBRATION_TEXTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "He walked into the room and sat down without saying a word.",
    "The museum is closed on Mondays, but it opens early on weekends.",
    "She sells sea shells by the sea shore every summer.",
    "A large crowd gathered outside the station to watch the parade.",
    "The weather forecast promises rain for the rest of the week.",
    "Turn left at the second traffic light and park behind the bakery.",
    "Our train was delayed by nearly an hour because of the snow.",
    "The children laughed as the puppy chased its own tail.",
    "He forgot his umbrella on the bus again this morning.",
    "The old bridge was rebuilt after the flood two years ago.",
    "Could you speak a little more slowly, please?",
    "The library has a new collection of maps from the last century.",
    "They planted tomatoes, beans and herbs in the small garden.",
    "The concert ended with a standing ovation that lasted for minutes.",
    "My grandmother still writes letters by hand to all her friends.",
    "The committee will announce its decision at the end of the month.",
    "A cold wind blew across the empty beach at dawn.",
    "The recipe calls for two eggs, a cup of flour and some butter.",
    "Nobody expected the small team to win the championship.",
    "The lighthouse keeper climbed the stairs every evening at six.",
    "Please remember to switch off the lights before you leave.",
    "The river freezes over in January and thaws in early spring.",
)

# Short Mandarin prompts in the style of the seed-tts Chinese test set (about 3-6 s each).
CJK_TEXTS: tuple[str, ...] = (
    "今天天气很好，我们一起去公园散步吧。",
    "他走进房间，一句话也没说就坐下了。",
    "博物馆星期一闭馆，但是周末很早就开门。",
    "请在第二个红绿灯左转，把车停在面包店后面。",
    "因为下雪，我们的火车晚点了将近一个小时。",
    "孩子们看着小狗追自己的尾巴，笑得很开心。",
    "这座老桥在两年前的洪水之后重新修建了。",
    "图书馆新收藏了一批上个世纪的地图。",
    "音乐会在长达几分钟的起立鼓掌中结束。",
    "我的奶奶仍然亲手给她所有的朋友写信。",
    "委员会将在月底宣布它的决定。",
    "离开之前请记得把灯关掉。",
)
# The CJK row's source: no published Higgs RTF exists for Chinese. What it checks is the
# length model (5 characters a second: Mandarin speaks 5.18 syllables a second, one per Han
# character, Pellegrino, Coupe & Marsico 2011, Language 87(3); "4-6 characters a second"
# for Higgs) and that RTF, a per-step cost, stays within the tolerance of the English figure.

# Voice-clone runs add a reference clip of this length and its transcript to every prompt,
# laid out as the released prompt builder does (worker_timing.prompt_tokens_for: the clip's
# 25 frames a second + 7 delay rows, its markers and the transcript's tokens). The published
# sweep clones a different reference for every utterance (seed-tts: each item has its own
# prompt clip), so every request misses the code cache and pays the encode; ``repeat_voice``
# models the other extreme, one voice for every request, encoded once.
CLONE_REF_SECONDS = 6.0
CLONE_REF_TEXT = "A reference recording of the voice to clone, read calmly."

# The published figures (calibration README): mean RTF on one H200, by task.
PUBLISHED_MEAN_RTF: dict[tuple[str, int], float] = {
    (LOW_LATENCY, 1): 0.276,
    (LOW_LATENCY, 16): 0.491,
    (HIGH_THROUGHPUT, 1): 0.389,
    (HIGH_THROUGHPUT, 16): 0.475,
}
PUBLISHED_CLONE_MEAN_RTF: dict[tuple[str, int], float] = {
    (LOW_LATENCY, 1): 0.295,
    (LOW_LATENCY, 16): 0.505,
    (HIGH_THROUGHPUT, 1): 0.399,
    (HIGH_THROUGHPUT, 16): 0.495,
}
SWEEP_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class SweepPoint:
    profile: str
    concurrency: int
    requests: int
    mean_rtf: float
    median_rtf: float
    median_ttfp: float
    p99_ttfp: float
    mean_queue_wait: float
    max_waiting: int
    audio_throughput: float  # audio seconds per wall second
    chars_per_second: float = 0.0  # characters of text per second of audio, over the run


def simulate(
    profile: DeployProfile,
    concurrency: int,
    requests_per_client: int = 10,
    params: TimingParams | None = None,
    texts: Sequence[str] = CALIBRATION_TEXTS,
    warm: bool = True,
    ref_audio_seconds: float = 0.0,
    repeat_voice: bool = False,
) -> SweepPoint:
    """Closed-loop clients against one engine on a virtual clock (voice clone: ``ref_audio_seconds`` > 0)."""
    clock = VirtualClock()
    model = StepModel(profile, params)
    # A benchmarked worker is warm: every lazy graph it will meet is already captured.
    precaptured = range(1, model.max_num_seqs + 1) if warm else ()
    engine = Engine(model, clock, precaptured=precaptured)
    frame_seconds = 1.0 / model.params.frames_per_second
    ttfps: list[float] = []
    rtfs: list[float] = []
    waits: list[float] = []
    audio_seconds = 0.0
    chars = 0
    max_waiting = 0
    sent = 0
    total = concurrency * requests_per_client

    def send(client: int) -> None:
        nonlocal sent
        nonlocal chars
        text = texts[(client + sent) % len(texts)]
        chars += len(text.strip())
        request = EngineRequest(
            request_id=f"c{client}-{sent}",
            prompt_tokens=model.prompt_tokens_for(text, ref_audio_seconds, CLONE_REF_TEXT if ref_audio_seconds else ""),
            total_frames=model.frames_for(text),
            # One repeated voice: only the first request encodes (its codes are cached after).
            overhead_seconds=model.overhead_seconds(ref_audio_seconds, encode=not (repeat_voice and sent > 0)),
        )
        sent += 1
        engine.submit(request)

    for client in range(concurrency):
        send(client)
    done = 0
    while done < total:
        for event in engine.poll():
            request = event.request
            if event.first_frame == 0:
                ttfps.append(event.ready_at - request.arrived_at)
            if event.final:
                done += 1
                duration = request.total_frames * frame_seconds
                rtfs.append((event.ready_at - request.arrived_at) / duration)
                waits.append(request.queue_wait or 0.0)
                audio_seconds += duration
                if sent < total:
                    send(int(request.request_id[1:].split("-")[0]))
        max_waiting = max(max_waiting, engine.num_waiting)
        wakeup = engine.next_wakeup()
        if wakeup is None:
            break
        clock.set(max(clock.now(), wakeup))
    return SweepPoint(
        profile=profile.source.rsplit("/", 1)[-1],
        concurrency=concurrency,
        requests=len(rtfs),
        mean_rtf=statistics.fmean(rtfs),
        median_rtf=statistics.median(rtfs),
        median_ttfp=statistics.median(ttfps),
        p99_ttfp=_percentile(ttfps, 0.99),
        mean_queue_wait=statistics.fmean(waits),
        max_waiting=max_waiting,
        audio_throughput=audio_seconds / clock.now(),
        chars_per_second=chars / audio_seconds,
    )


def sweep(
    profiles: Sequence[str] = (LOW_LATENCY, HIGH_THROUGHPUT),
    concurrencies: Sequence[int] = SWEEP_CONCURRENCY,
    requests_per_client: int = 10,
    params: TimingParams | None = None,
    voice_clone: bool = False,
    cjk: bool = False,
    repeat_voice: bool = False,
) -> list[SweepPoint]:
    ref_seconds = CLONE_REF_SECONDS if voice_clone or repeat_voice else 0.0
    texts = CJK_TEXTS if cjk else CALIBRATION_TEXTS
    points = []
    for name in profiles:
        profile = load_deploy_profile(name)
        for concurrency in concurrencies:
            points.append(
                simulate(profile, concurrency, requests_per_client, params, texts, ref_audio_seconds=ref_seconds, repeat_voice=repeat_voice)
            )
    return points


def format_table(points: Sequence[SweepPoint], voice_clone: bool = False) -> str:
    published_rtf = PUBLISHED_CLONE_MEAN_RTF if voice_clone else PUBLISHED_MEAN_RTF
    lines = [
        "| profile | c | mean RTF | published | median RTF | median TTFP ms | p99 TTFP ms | queue wait ms | max waiting | audio-s/s | chars/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        published = published_rtf.get((_profile_key(p.profile), p.concurrency))
        lines.append(
            f"| {p.profile.removeprefix('higgs_multimodal_qwen3_').removesuffix('.yaml')} | {p.concurrency} "
            f"| {p.mean_rtf:.3f} | {'' if published is None else f'{published:.3f}'} | {p.median_rtf:.3f} "
            f"| {p.median_ttfp * 1000:.0f} | {p.p99_ttfp * 1000:.0f} | {p.mean_queue_wait * 1000:.0f} "
            f"| {p.max_waiting} | {p.audio_throughput:.1f} | {p.chars_per_second:.1f} |"
        )
    return "\n".join(lines)


def _profile_key(profile: str) -> str:
    for name in (LOW_LATENCY, HIGH_THROUGHPUT):
        if profile.endswith(name):
            return name
    return profile


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build_parser() -> argparse.ArgumentParser:
    """``higgs-gateway emulator``: the emulator's own tools (running one is ``emulate``)."""
    root = argparse.ArgumentParser(prog="higgs-gateway emulator", description="The worker emulator's tools.",
                                   formatter_class=HelpFormatter)  # fmt: skip
    tools = root.add_subparsers(dest="tool", required=True, metavar="TOOL")
    parser = tools.add_parser(
        "calibrate", help="the timing model's RTF/TTFP sweep next to the published figures (virtual clock, ~1 s)",
        description="Print the emulator's modelled RTF/TTFP sweep next to the published figures.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--requests-per-client", type=int, default=10)
    parser.add_argument("--profile", action="append", help="deploy profile name or path (repeatable)")
    parser.add_argument("--concurrency", type=int, action="append", help="concurrency level (repeatable)")
    parser.add_argument("--voice-clone", action="store_true", help=f"every prompt carries a {CLONE_REF_SECONDS:g} s reference clip")
    parser.add_argument("--repeat-voice", action="store_true", help="voice clone with one voice for every request (encoded once)")
    parser.add_argument("--cjk", action="store_true", help="Mandarin texts (no published RTF: the English figure is shown)")
    return root


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    points = sweep(
        profiles=args.profile or (LOW_LATENCY, HIGH_THROUGHPUT),
        concurrencies=args.concurrency or SWEEP_CONCURRENCY,
        requests_per_client=args.requests_per_client,
        voice_clone=args.voice_clone,
        cjk=args.cjk,
        repeat_voice=args.repeat_voice,
    )
    print(format_table(points, args.voice_clone or args.repeat_voice))
    return 0
