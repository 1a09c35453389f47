"""``higgs-gateway bench upload-stall``: what uploading voices costs the streams already running.

The released worker saves an uploaded clip on its event loop (``serving_speech.py`` 948,
985), so its streams pause meanwhile; the emulator blocks its loop as long (8 ms + 2 ms per
clip-second, ``gateway/worker/timing.py``). One fleet per variant (one low-latency + one
high-throughput worker, `adaptive`, fresh processes) serves a closed loop at ``--concurrency``
while ``--voices`` voices are uploaded through the gateway all at once:

- ``paced``: the gateway's default, uploads to a streaming worker one at a time,
  ``voices.upload_spacing_ms`` apart (``gateway/voices/pacing.py``);
- ``unpaced``: ``upload_spacing_ms: 0``, every upload sent at once.

For every stream with audio arriving while the uploads ran: the longest gap between two of
its chunks, against the same streams' longest gap before the uploads began.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.bench.client import ClientOptions, RequestResult, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, free_port, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.report import whole
from gateway.bench.scenarios import run_async, run_closed_until
from gateway.bench.stats import percentile
from gateway.bench.voice_clone import upload_voices
from gateway.bench.workload import TEXTS, text_order
from gateway.config import VoicesConfig
from gateway.help_format import HelpFormatter

VARIANTS = (("paced", None), ("unpaced", 0.0))  # (label, voices.upload_spacing_ms; None = the default)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("upload-stall", help="the stall voice uploads cause on running streams",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/upload-stall"))
    parser.add_argument("--time-scale", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--voices", type=int, default=10)
    parser.add_argument("--clip", type=float, default=10.0, help="seconds per uploaded clip")
    parser.add_argument("--before", type=float, default=8.0, help="modelled seconds of streaming before the uploads")
    parser.add_argument("--after", type=float, default=8.0, help="modelled seconds of streaming after them")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="higgs-bench-") as scratch:
        for label, spacing in VARIANTS:
            rows.append(_measure(Path(scratch) / label, label, spacing, args))
    document = {"mode": "upload_stall", "params": vars_of(args), "rows": rows, "command": _command()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "upload-stall.json").write_text(_json(document))
    path = args.out / "README.md"
    path.write_text("\n".join(markdown(document)) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def vars_of(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k not in ("func", "out", "command")}


def _json(document: dict[str, Any]) -> str:
    import json

    return json.dumps(document, indent=2) + "\n"


def _command() -> str:
    import shlex

    return "higgs-gateway bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])


def _measure(work_dir: Path, label: str, spacing_ms: float | None, args: argparse.Namespace) -> dict[str, Any]:
    scale = args.time_scale
    with Fleet(work_dir) as fleet:
        ll = fleet.emulator("worker1", LL_PROFILE, scale, extra=["--warm"])
        ht = fleet.emulator("worker2", HT_PROFILE, scale, extra=["--warm"])
        port = free_port()
        document = gateway_document(port, fleet.work_dir / "data", [ll.url], [ht.url], "adaptive", scale)
        # The spacing is wall time at the gateway: compressed like every other duration here.
        spacing = VoicesConfig().upload_spacing_ms if spacing_ms is None else spacing_ms
        document["voices"] = {"upload_spacing_ms": spacing * scale}
        gateway = fleet.gateway("gateway", write_config(document, fleet.work_dir / "gateway.yaml"), port)
        wait_speech(gateway.url)
        return run_async(_streams_and_uploads(gateway.url, label, spacing, args))


async def _streams_and_uploads(url: str, label: str, spacing_ms: float, args: argparse.Namespace) -> dict[str, Any]:
    scale = args.time_scale
    client = make_client("aiohttp", ClientOptions(url=url))
    specs = [RequestSpec(text) for text in text_order(64, args.seed, TEXTS)]
    stop = asyncio.Event()
    names = [f"stall{i:02d}" for i in range(args.voices)]
    window: list[float] = []

    async def uploads() -> None:
        await asyncio.sleep(args.before * scale)
        window.append(time.perf_counter())
        await upload_voices(url, names, args.clip)
        window.append(time.perf_counter())
        await asyncio.sleep(args.after * scale)
        stop.set()

    try:
        phase, _ = await asyncio.gather(
            run_closed_until(client, specs, args.concurrency, label, stop, keep_chunks=True), uploads()
        )
    finally:
        await client.close()
    begin, end = (t - phase.started_at for t in window)
    during, before = _gaps(phase.results, begin, end)
    return {
        "label": label,
        "upload_spacing_ms": spacing_ms,
        "uploads_took_ms": (end - begin) / scale * 1000,
        "streams": len(during),
        "errors": sum(not r.ok for r in phase.results),
        "gap_during_ms": _stats(during, scale),
        "gap_before_ms": _stats(before, scale),
    }


def _gaps(results: list[RequestResult], begin: float, end: float) -> tuple[list[float], list[float]]:
    """Per stream with audio during [begin, end]: its longest chunk gap ending in the window,
    and its longest gap before ``begin`` (its own baseline)."""
    during, before = [], []
    for result in results:
        times = [result.sent_s + offset for offset, _ in result.chunks]
        gaps = list(zip(times, times[1:], strict=False))
        inside = [b - a for a, b in gaps if begin <= b and a <= end]
        if not inside:
            continue
        during.append(max(inside))
        earlier = [b - a for a, b in gaps if b < begin]
        if earlier:
            before.append(max(earlier))
    return during, before


def _stats(values: list[float], scale: float) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "max": None}
    return {"p50": percentile(values, 50) / scale * 1000, "max": max(values) / scale * 1000}


def markdown(document: dict[str, Any]) -> list[str]:
    params = document["params"]
    lines = [
        "# Voice uploads against running streams (emulated)",
        "",
        f"Reproduce: `{document['command']}`",
        "",
        f"One low-latency + one high-throughput worker, `adaptive`, a closed loop at c{params['concurrency']}; "
        f"{params['voices']} voices ({params['clip']:g} s clips) uploaded through the gateway all at once after "
        f"{params['before']:g} modelled s. Times in modelled ms (time scale {params['time_scale']:g}). *Longest "
        "chunk gap*: per stream with audio while the uploads ran, the longest wait between two of its chunks "
        "(*before*: the longest such gap the streams that began before the uploads had until then).",
        "",
        f"| variant | upload spacing (ms) | {params['voices']} uploads took (ms) | streams during | longest chunk gap during, p50 / max (ms) | before, p50 / max (ms) | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in document["rows"]:
        during, before = row["gap_during_ms"], row["gap_before_ms"]
        lines.append(
            f"| {row['label']} | {row['upload_spacing_ms']:g} | {row['uploads_took_ms']:.0f} | {row['streams']} | "
            f"{whole(during['p50'])} / {whole(during['max'])} | {whole(before['p50'])} / {whole(before['max'])} | {row['errors']} |"
        )
    return lines
