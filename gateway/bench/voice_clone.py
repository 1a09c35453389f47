"""The voice-clone trace of ``bench compare``: voice affinity on and off, in one run.

Two identical fleets (two low-latency workers, the `adaptive` policy, fresh processes), one
with ``voice_affinity`` on and one with it off. Each gets the same voices
uploaded (a distinct clip each: the worker caches codes by the clip) and then the same
open-loop trace, every request cloning one of them, picked at random.

What affinity can save is a worker's encode of the clip: with fewer voices than one
worker's code cache (256, ``pools.affinity``) every worker soon holds every voice, and only
each voice's first request on each worker encodes, with or without affinity. The saving
shows once the voices outnumber one worker's cache but not the fleet's: without affinity
each worker cycles through all of them; with it each holds its share.

How long the clips are sets what a hit is worth (the encode is per second of clip). By
default the trace's clips are as long as the voice prompts Higgs Audio publishes with its
model, so that length is not a knob chosen for the result.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import wave
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gateway.bench import report
from gateway.bench.client import ClientOptions
from gateway.bench.fleet import LL_PROFILE, Fleet, free_port, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.scenarios import RunOptions, run_async, trace
from gateway.bench.workload import voice_clone
from gateway.config import RoutingThresholds
from gateway.types import SlaClass

UPLOAD_CONCURRENCY = 4
# Seconds of each of the 16 voice prompts in boson-ai/higgs-audio, examples/voice_prompts
# (read from their WAV headers): median 11.6 s, mean 12.7 s, 5.9 to 27.7 s.
PUBLISHED_CLIPS_S = (10.17, 12.26, 13.30, 19.18, 10.40, 7.71, 6.41, 6.80,
                     27.70, 10.99, 17.60, 11.00, 14.20, 16.01, 5.93, 12.89)  # fmt: skip
VARIANTS = (("affinity", True), ("no-affinity", False))  # (label, routing.thresholds.voice_affinity)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voice-clone-duration", type=float, default=0.0,
                        help="voice-clone trace, modelled seconds (0 = skip)")
    parser.add_argument("--voice-clone-voices", type=int, default=600, help="voice-clone trace: uploaded voices")
    parser.add_argument("--voice-clone-rate", type=float, default=3.0, help="voice-clone trace: requests/s")
    parser.add_argument("--voice-clone-clip", type=float, default=0.0,
                        help="voice-clone trace: seconds per voice's clip (0 = the lengths of Higgs Audio's published "
                             "voice prompts, in turn)")  # fmt: skip
    parser.add_argument("--voice-clone-class", default="latency", choices=[c.value for c in SlaClass],
                        help="voice-clone trace: the requests' x-sla-class")  # fmt: skip


def clip_wav(index: int, seconds: float) -> bytes:
    """A 24 kHz mono WAV the gateway accepts as a voice sample; a different pitch per index,
    so every voice is its own clip to the worker's caches."""
    rate = 24_000
    t = np.arange(int(seconds * rate)) / rate
    pitch = 110.0 + 0.37 * index
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 3.0 * t))
    signal = sum(a * np.sin(2 * np.pi * pitch * k * t) for k, a in ((1, 0.6), (2, 0.25), (3, 0.1)))
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((signal * envelope * 0.5 * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def clip_lengths(voices: int, clip_s: float) -> list[float]:
    """Each voice's clip length: ``clip_s`` for all, or (0) the published prompts' lengths in turn."""
    if clip_s > 0:
        return [clip_s] * voices
    return [PUBLISHED_CLIPS_S[index % len(PUBLISHED_CLIPS_S)] for index in range(voices)]


async def upload_voices(url: str, names: list[str], clips_s: list[float]) -> None:
    gate = asyncio.Semaphore(UPLOAD_CONCURRENCY)
    async with httpx.AsyncClient(timeout=120) as client:

        async def upload(index: int, name: str) -> None:
            async with gate:
                response = await client.post(
                    f"{url}/v1/audio/voices", data={"name": name, "consent": "true"},
                    files={"audio_sample": (f"{name}.wav", clip_wav(index, clips_s[index]), "audio/wav")},
                )  # fmt: skip
                if response.status_code != 200:
                    raise RuntimeError(f"upload of {name} answered {response.status_code}: {response.text[:200]}")

        await asyncio.gather(*(upload(i, name) for i, name in enumerate(names)))


def measure(scratch: Path, args: argparse.Namespace, notes: dict[str, Any]) -> list[dict[str, Any]]:
    """Both variants at once, each on its own fresh fleet: on a shared machine, whatever else
    runs slows both alike (one after the other, a busy minute would land on one only)."""
    sla = SlaClass(args.voice_clone_class)
    arrivals = voice_clone(args.voice_clone_rate, args.voice_clone_duration, args.seed, args.voice_clone_voices, sla)
    names = [f"clone{i:04d}" for i in range(args.voice_clone_voices)]
    clips_s = clip_lengths(args.voice_clone_voices, args.voice_clone_clip)
    # clip_s is the mean over voices: voices are picked uniformly, so it is also the mean per request.
    params = {"kind": "voice_clone", "duration_s": args.voice_clone_duration, "rate": args.voice_clone_rate,
              "voices": args.voice_clone_voices, "clip_s": round(sum(clips_s) / len(clips_s), 2),
              "clips": "fixed" if args.voice_clone_clip > 0 else "published", "sla_class": sla.value,
              "variants_run": "concurrently"}  # fmt: skip
    with ExitStack() as stack:
        runs = []
        for label, affinity in VARIANTS:
            fleet = stack.enter_context(Fleet(scratch / f"voice-clone-{label}"))
            url, worker_urls = _start(fleet, affinity, args.time_scale)
            run_async(upload_voices(url, names, clips_s))
            options = RunOptions(ClientOptions(url=url), f"voice-clone {label}", time_scale=args.time_scale,
                                 seed=args.seed, progress=not args.no_progress,
                                 notes={**notes, "voice_affinity": affinity})  # fmt: skip
            runs.append((label, options, worker_urls))

        async def both() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(trace(o, arrivals, "voice_clone", params, voice_names=names) for _, o, _ in runs)))

        documents = run_async(both())
        for (_, _, worker_urls), document in zip(runs, documents, strict=True):
            document["phases"][0]["reference_code_cache"] = run_async(code_cache_counts(worker_urls))
    for (label, _, _), document in zip(runs, documents, strict=True):
        report.write(document, args.out, f"voice-clone-{label}")
    return documents


async def code_cache_counts(worker_urls: list[str]) -> dict[str, dict[str, int]]:
    """Each emulated worker's own count of reference-code cache hits and misses (what the
    gateway's affinity guess is for; the real worker counts neither)."""
    async with httpx.AsyncClient(timeout=30) as client:
        counts = {}
        for index, worker_url in enumerate(worker_urls, start=1):
            caches = (await client.get(f"{worker_url}/emulator/info")).json()["reference_caches"]
            counts[f"worker{index}"] = {"hits": int(caches["reference_code_hits"]), "misses": int(caches["reference_code_misses"])}
        return counts


def _start(fleet: Fleet, affinity: bool, time_scale: float) -> tuple[str, list[str]]:
    """Two low-latency workers and a gateway with voice affinity on or off; its URL and theirs."""
    workers = [fleet.emulator(f"worker{i}", LL_PROFILE, time_scale, extra=["--warm"]) for i in (1, 2)]
    port = free_port()
    document = gateway_document(port, fleet.work_dir / "data", [w.url for w in workers], [], "adaptive", time_scale)
    thresholds = document["routing"]["thresholds"]
    thresholds["voice_affinity"] = affinity
    # Predictions are in the emulator's compressed time, like the queue budget: so is the encode.
    defaults = RoutingThresholds()
    thresholds["voice_affinity_encode_ms_per_second"] = defaults.voice_affinity_encode_ms_per_second * time_scale
    thresholds["voice_affinity_bonus_ms"] = defaults.voice_affinity_bonus_ms * time_scale
    gateway = fleet.gateway("gateway", write_config(document, fleet.work_dir / "gateway.yaml"), port)
    wait_speech(gateway.url)
    return gateway.url, [w.url for w in workers]


def section(documents: list[dict[str, Any]]) -> list[str]:
    """The report's voice-clone section: repeated-voice TTFP and throughput, both variants."""
    clones = [d for d in documents if d["mode"] == "trace" and d["params"].get("kind") == "voice_clone"]
    if not clones:
        return []
    params = clones[0]["params"]
    lines = [
        "## Voice-clone trace (open loop): voice affinity on and off",
        "",
        f"{params['duration_s']:g} modelled seconds of Poisson arrivals at {params['rate']:g}/s, each cloning one of "
        f"{params['voices']} uploaded voices ({_clips(params)}) picked at random, class "
        f"`{params.get('sla_class', 'latency')}`; two low-latency "
        "workers, `adaptive`, one fresh fleet per variant, both variants run at the same time (the same "
        "machine load on both). *Repeated*: a request whose voice was used "
        "earlier in the trace.",
        "",
        "| variant | requests | errors | repeated TTFP p10 (ms) | repeated TTFP p50 (ms) | repeated TTFP p90 (ms) | repeated TTFP mean (ms) | first-use TTFP p50 (ms) | e2e p50 (ms) | audio-s/s | code-cache hits, repeated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for document in clones:
        phase = document["phases"][0]
        stats = phase["repeated_voices"]
        repeated, first = stats["repeated"], stats["first"]
        lines.append(
            f"| {document['label'].removeprefix('voice-clone ')} | {phase['sent']} | {sum(phase['errors'].values())} | "
            f"{_ms(repeated.get('ttfp_p10_s'))} | {_ms(repeated['ttfp_p50_s'])} | {_ms(repeated['ttfp_p90_s'])} | "
            f"{_ms(repeated.get('ttfp_mean_s'))} | {_ms(first['ttfp_p50_s'])} | "
            f"{_ms(phase['e2e_s']['median'])} | {phase['audio_s_per_s']:.2f} | {_hit_rate(phase)} |"
        )
    by_label = {d["label"].removeprefix("voice-clone "): d["phases"][0] for d in clones}
    on, off = by_label.get("affinity"), by_label.get("no-affinity")
    if on and off and on["repeated_voices"]["repeated"]["ttfp_p50_s"] and off["repeated_voices"]["repeated"]["ttfp_p50_s"]:
        saved = 1 - on["repeated_voices"]["repeated"]["ttfp_p50_s"] / off["repeated_voices"]["repeated"]["ttfp_p50_s"]
        lines += ["", f"With affinity, repeated-voice TTFP p50 is {saved:.1%} lower; audio-s/s "
                      f"{on['audio_s_per_s']:.2f} against {off['audio_s_per_s']:.2f} without."]
    lines += ["", "*Code-cache hits, repeated*: the emulated workers' own count of prompts whose reference codes "
                  "were cached (`GET /emulator/info`), over the repeated requests (every first use encodes)."]
    if on and off:
        lines += _what_the_hits_are_worth(on, off, params, clones[0].get("notes", {}))
    return [*lines, ""]


def _what_the_hits_are_worth(on: dict[str, Any], off: dict[str, Any], params: dict[str, Any], notes: dict[str, Any]) -> list[str]:
    """The mean TTFP the extra hits should save (each skips one encode of the clip), beside
    the mean saving measured: what routing can still win on this trace."""
    hits_on, hits_off = _hits(on), _hits(off)
    mean_on, mean_off = (phase["repeated_voices"]["repeated"].get("ttfp_mean_s") for phase in (on, off))
    per_second = notes.get("emulator_timing", {}).get("ref_audio_encode_ms_per_second")
    if hits_on is None or hits_off is None or mean_on is None or mean_off is None or per_second is None:
        return []
    encode_ms = float(per_second) * params["clip_s"]
    more = hits_on - hits_off
    return ["", f"Each hit skips the clip's encode ({float(per_second):g} ms per second of clip: {encode_ms:.0f} ms): "
                f"{more:.0%} more of the repeated requests hitting is worth {more * encode_ms:.0f} ms of mean TTFP; "
                f"measured, the mean is {(mean_off - mean_on) * 1000:.0f} ms lower with affinity."]  # fmt: skip


def _hits(phase: dict[str, Any]) -> float | None:
    counts = phase.get("reference_code_cache")
    if not counts:
        return None
    hits = sum(c["hits"] for c in counts.values())
    repeated = hits + sum(c["misses"] for c in counts.values()) - phase["repeated_voices"]["first"]["count"]
    return hits / repeated if repeated > 0 else None


def _hit_rate(phase: dict[str, Any]) -> str:
    """Reference-code cache hits over the repeated requests: every first use is a miss."""
    rate = _hits(phase)
    return "–" if rate is None else f"{rate:.0%}"


def _clips(params: dict[str, Any]) -> str:
    if params.get("clips") == "published":
        return f"clips as long as Higgs Audio's 16 published voice prompts, {params['clip_s']:g} s mean"
    return f"{params['clip_s']:g} s clips"


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f}"
