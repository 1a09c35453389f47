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
VARIANTS = (("affinity", True), ("no-affinity", False))  # (label, routing.thresholds.voice_affinity)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voice-clone-duration", type=float, default=0.0,
                        help="voice-clone trace, modelled seconds (0 = skip)")
    parser.add_argument("--voice-clone-voices", type=int, default=600, help="voice-clone trace: uploaded voices")
    parser.add_argument("--voice-clone-rate", type=float, default=3.0, help="voice-clone trace: requests/s")
    parser.add_argument("--voice-clone-clip", type=float, default=6.0, help="voice-clone trace: seconds per voice's clip")
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


async def upload_voices(url: str, names: list[str], clip_s: float) -> None:
    gate = asyncio.Semaphore(UPLOAD_CONCURRENCY)
    async with httpx.AsyncClient(timeout=120) as client:

        async def upload(index: int, name: str) -> None:
            async with gate:
                response = await client.post(
                    f"{url}/v1/audio/voices", data={"name": name, "consent": "true"},
                    files={"audio_sample": (f"{name}.wav", clip_wav(index, clip_s), "audio/wav")},
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
    params = {"kind": "voice_clone", "duration_s": args.voice_clone_duration, "rate": args.voice_clone_rate,
              "voices": args.voice_clone_voices, "clip_s": args.voice_clone_clip, "sla_class": sla.value,
              "variants_run": "concurrently"}  # fmt: skip
    with ExitStack() as stack:
        runs = []
        for label, affinity in VARIANTS:
            fleet = stack.enter_context(Fleet(scratch / f"voice-clone-{label}"))
            url = _start(fleet, affinity, args.time_scale)
            run_async(upload_voices(url, names, args.voice_clone_clip))
            options = RunOptions(ClientOptions(url=url), f"voice-clone {label}", time_scale=args.time_scale,
                                 seed=args.seed, progress=not args.no_progress,
                                 notes={**notes, "voice_affinity": affinity})  # fmt: skip
            runs.append((label, options))

        async def both() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(trace(o, arrivals, "voice_clone", params, voice_names=names) for _, o in runs)))

        documents = run_async(both())
    for (label, _), document in zip(runs, documents, strict=True):
        report.write(document, args.out, f"voice-clone-{label}")
    return documents


def _start(fleet: Fleet, affinity: bool, time_scale: float) -> str:
    """Two low-latency workers and a gateway with voice affinity on or off; its URL."""
    workers = [fleet.emulator(f"worker{i}", LL_PROFILE, time_scale, extra=["--warm"]) for i in (1, 2)]
    port = free_port()
    document = gateway_document(port, fleet.work_dir / "data", [w.url for w in workers], [], "adaptive", time_scale)
    thresholds = document["routing"]["thresholds"]
    thresholds["voice_affinity"] = affinity
    # Predictions are in the emulator's compressed time, like the queue budget.
    thresholds["voice_affinity_bonus_ms"] = RoutingThresholds().voice_affinity_bonus_ms * time_scale
    gateway = fleet.gateway("gateway", write_config(document, fleet.work_dir / "gateway.yaml"), port)
    wait_speech(gateway.url)
    return gateway.url


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
        f"{params['voices']} uploaded voices ({params['clip_s']:g} s clips) picked at random, class "
        f"`{params.get('sla_class', 'latency')}`; two low-latency "
        "workers, `adaptive`, one fresh fleet per variant, both variants run at the same time (the same "
        "machine load on both). *Repeated*: a request whose voice was used "
        "earlier in the trace.",
        "",
        "| variant | requests | errors | repeated TTFP p50 (ms) | repeated TTFP p90 (ms) | first-use TTFP p50 (ms) | e2e p50 (ms) | audio-s/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for document in clones:
        phase = document["phases"][0]
        stats = phase["repeated_voices"]
        repeated, first = stats["repeated"], stats["first"]
        lines.append(
            f"| {document['label'].removeprefix('voice-clone ')} | {phase['sent']} | {sum(phase['errors'].values())} | "
            f"{_ms(repeated['ttfp_p50_s'])} | {_ms(repeated['ttfp_p90_s'])} | {_ms(first['ttfp_p50_s'])} | "
            f"{_ms(phase['e2e_s']['median'])} | {phase['audio_s_per_s']:.2f} |"
        )
    by_label = {d["label"].removeprefix("voice-clone "): d["phases"][0] for d in clones}
    on, off = by_label.get("affinity"), by_label.get("no-affinity")
    if on and off and on["repeated_voices"]["repeated"]["ttfp_p50_s"] and off["repeated_voices"]["repeated"]["ttfp_p50_s"]:
        saved = 1 - on["repeated_voices"]["repeated"]["ttfp_p50_s"] / off["repeated_voices"]["repeated"]["ttfp_p50_s"]
        lines += ["", f"With affinity, repeated-voice TTFP p50 is {saved:.1%} lower; audio-s/s "
                      f"{on['audio_s_per_s']:.2f} against {off['audio_s_per_s']:.2f} without."]
    return [*lines, ""]


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f}"
