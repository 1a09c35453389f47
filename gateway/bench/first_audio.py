"""``higgs-gateway bench first-audio``: when the first audio leaves, per format and speed.

One emulated low-latency and one high-throughput worker at real time (time scale 1: the
worker's real chunk schedule, a 40 ms first chunk then a ~250 ms hole) behind a gateway.
For every ``response_format`` x ``speed`` in {0.8, 1, 1.5}: the client's time to the first
audio byte (a wav header alone does not count), and what it adds over ``pcm`` at speed 1,
p50 and p99, at c1 and c16; at c1 also the ``x-gateway-predicted-ttfp-ms`` header against
the measured TTFP. Every stream is read to the end (only completed streams teach the
routing's curves). c1: one request at a time, the cells shuffled round by round so drift
hits every cell alike, every cell of a round speaking the same text; each stream is decoded
as a client would (PyAV) and its length compared with pcm's at the same speed and text.
c16: a closed loop of 16 clients over all cells' requests shuffled together, so the gateway
encodes 15 other streams of every kind while each one starts.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import av

from gateway.bench.arguments import add_quiet_arguments, load_average, wait_for_quiet
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, free_port, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.scenarios import run_async
from gateway.bench.stats import percentile
from gateway.bench.workload import SHORT_TEXTS
from gateway.help_format import HelpFormatter
from gateway.types import PREDICTED_TTFP_HEADER
from gateway.types.codec import FRAME_SECONDS

FORMATS = ("pcm", "wav", "opus", "flac", "mp3", "aac")
SPEEDS = (1.0, 0.8, 1.5)
WAV_HEADER_BYTES = 44
# /2: c1 rounds share a text and every stream's decoded length is measured; /1 runs drew a
# text per request and decoded nothing.
SCHEMA = "higgs-gateway-bench-first-audio/2"
PCM_BYTES_PER_SECOND = 48_000  # the workers' 24 kHz mono s16le
DEMUXERS = {"wav": "wav", "opus": "ogg", "flac": "flac", "mp3": "mp3", "aac": "aac"}


@dataclass
class Cell:
    fmt: str
    speed: float
    ttfp_ms: list[float] = field(default_factory=list)
    predicted_ms: list[float] = field(default_factory=list)
    errors: int = 0
    decoded_s: dict[int, float] = field(default_factory=dict)  # c1: round -> decoded length

    @property
    def name(self) -> str:
        return f"{self.fmt} x{self.speed:g}"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("first-audio", help="time to first audio per format and speed, and its prediction",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/first-audio"))
    parser.add_argument("--requests", type=int, default=20, help="c1: requests per cell (one per round, interleaved)")
    parser.add_argument("--c16-requests", type=int, default=32, help="c16: requests per cell")
    parser.add_argument("--levels", default="1,16", help="concurrency levels (1 and/or 16)")
    add_quiet_arguments(parser, load=1.5, before="before the run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-only", action="store_true", help="re-render README.md from first-audio.json in --out")
    parser.set_defaults(func=run)


def decoded_seconds(fmt: str, data: bytes) -> float:
    """The stream's length as a client decoding it with PyAV hears it (pcm: read raw)."""
    if fmt == "pcm":
        return len(data) / PCM_BYTES_PER_SECOND
    samples, rate = 0, 1
    with av.open(io.BytesIO(data), format=DEMUXERS[fmt]) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            samples, rate = samples + frame.samples, frame.sample_rate
    return samples / rate


async def _one(
    session: aiohttp.ClientSession, url: str, cell: Cell, text: str, whole: bool, round_: int | None = None
) -> None:
    """One request; with ``round_`` (c1) the whole stream is kept and its decoded length noted."""
    body = {"model": "bosonai/higgs-audio-v3-tts-4b", "voice": "default", "input": text, "response_format": cell.fmt, "speed": cell.speed}
    skip = WAV_HEADER_BYTES if cell.fmt == "wav" else 0
    sent = time.perf_counter()
    parts: list[bytes] = []
    try:
        async with session.post(f"{url}/v1/audio/speech", json=body) as response:
            if response.status != 200:
                await response.read()
                cell.errors += 1
                return
            predicted = response.headers.get(PREDICTED_TTFP_HEADER)
            seen, first = 0, None
            async for data in response.content.iter_any():
                seen += len(data)
                if round_ is not None:
                    parts.append(data)
                if first is None and seen > skip:
                    first = time.perf_counter() - sent
                    if not whole:
                        break
            if first is None:
                cell.errors += 1
                return
            cell.ttfp_ms.append(first * 1000)
            if predicted is not None:
                cell.predicted_ms.append(float(predicted))
    except (aiohttp.ClientError, TimeoutError, OSError):
        cell.errors += 1
        return
    if round_ is not None:
        # After the stream: at c1 nothing else runs while the client decodes.
        cell.decoded_s[round_] = decoded_seconds(cell.fmt, b"".join(parts))


async def _measure(url: str, level: int, per_cell: int, seed: int) -> list[Cell]:
    """c1: one request at a time, cells shuffled round by round. c16: a closed loop of 16
    clients over every cell's requests shuffled together, so each cell sees the same mix
    of streams already running (none starts in lockstep with 15 others)."""
    cells = [Cell(fmt, speed) for fmt in FORMATS for speed in SPEEDS]
    rng = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        # Warm: connections, codec tables, and enough completed streams for the routing's
        # curves to learn this fleet (its priors assume a longer, typical prompt).
        warm = [Cell(fmt, speed) for fmt, speed in [(c.fmt, c.speed) for c in cells] * 2]
        for cell in warm:
            await _one(session, url, cell, rng.choice(SHORT_TEXTS), whole=True)
        if level == 1:
            for round_ in range(per_cell):
                order = cells[:]
                rng.shuffle(order)
                text = rng.choice(SHORT_TEXTS)  # one text per round: each length has pcm's beside it
                for cell in order:
                    await _one(session, url, cell, text, whole=True, round_=round_)
            return cells
        tasks = [cell for cell in cells for _ in range(per_cell)]
        rng.shuffle(tasks)
        scratch = {id(cell): Cell(cell.fmt, cell.speed) for cell in cells}
        tasks = [scratch[id(cell)] for cell in tasks[:level]] + tasks  # the first wave starts together: not counted
        queue = iter(tasks)

        async def client() -> None:
            for cell in queue:
                await _one(session, url, cell, rng.choice(SHORT_TEXTS), whole=True)

        await asyncio.gather(*(client() for _ in range(level)))
    return cells


def _summary(cells: list[Cell]) -> list[dict[str, Any]]:
    base = next(c for c in cells if c.fmt == "pcm" and c.speed == 1.0)
    base_p50, base_p99 = percentile(base.ttfp_ms, 50), percentile(base.ttfp_ms, 99)
    rows = []
    for cell in cells:
        p50, p99 = percentile(cell.ttfp_ms, 50), percentile(cell.ttfp_ms, 99)
        row: dict[str, Any] = {
            "format": cell.fmt, "speed": cell.speed, "requests": len(cell.ttfp_ms), "errors": cell.errors,
            "ttfp_p50_ms": round(p50, 1), "ttfp_p99_ms": round(p99, 1),
            "added_p50_ms": round(p50 - base_p50, 1), "added_p99_ms": round(p99 - base_p99, 1),
        }  # fmt: skip
        if cell.predicted_ms:
            predicted = percentile(cell.predicted_ms, 50)
            row["predicted_p50_ms"] = round(predicted, 1)
            row["prediction_error"] = round((predicted - p50) / p50, 4)
        reference = next(c for c in cells if c.fmt == "pcm" and c.speed == cell.speed).decoded_s
        longer = [(cell.decoded_s[r] - reference[r]) * 1000 for r in cell.decoded_s if r in reference]
        if longer:
            # Decoded length over pcm's at the same speed and text: the codec's own frames.
            row["decoded_over_pcm_p50_ms"] = round(percentile(longer, 50), 1)
            row["decoded_over_pcm_max_ms"] = round(max(longer, key=abs), 1)
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    if args.report_only:
        document = json.loads((out / "first-audio.json").read_text())
        write_report(document, out / "README.md")
        return 0
    levels = [int(level) for level in args.levels.split(",")]
    load_before = wait_for_quiet(args.quiet_load, args.quiet_wait)
    results: dict[str, list[dict[str, Any]]] = {}
    loads = {}
    with tempfile.TemporaryDirectory(prefix="higgs-first-audio-") as scratch, Fleet(Path(scratch)) as fleet:
        ll = fleet.emulator("ll", LL_PROFILE, 1.0, extra=["--warm"])
        ht = fleet.emulator("ht", HT_PROFILE, 1.0, extra=["--warm"])
        port = free_port()
        config = gateway_document(port, Path(scratch) / "data", [ll.url], [ht.url], "adaptive")
        gateway = fleet.gateway("gateway", write_config(config, Path(scratch) / "gateway.yaml"), port)
        wait_speech(gateway.url)
        for level in levels:
            per_cell = args.requests if level == 1 else args.c16_requests
            cells = run_async(_measure(gateway.url, level, per_cell, args.seed))
            results[f"c{level}"] = _summary(cells)
            loads[f"c{level}"] = round(load_average(), 2)
    document = {
        "schema": SCHEMA,
        "machine": f"{os.cpu_count()}-core {os.uname().machine}",
        "command": "higgs-gateway bench first-audio " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "first-audio"] else sys.argv[1:]),
        "load_before": round(load_before, 2),
        "load_after": loads,
        "levels": results,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "first-audio.json").write_text(json.dumps(document, indent=2) + "\n")
    path = write_report(document, out / "README.md")
    print(f"wrote {path}", file=sys.stderr)
    return 0


# Targets at c1: what the gateway adds to pcm's TTFP (p50) for every format at speed 1 and
# for pcm at the other speeds; the predicted TTFP header against the measured, every cell;
# every stream's decoded length within one codec frame (the model's 40 ms) of pcm's.
ADDED_TARGET_MS = 15.0
PREDICTION_TARGET = 0.10
DECODED_TARGET_MS = FRAME_SECONDS * 1000


def _targets(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    judged = [r for r in rows if (r["speed"] == 1.0) != (r["format"] == "pcm")]
    added_ok = [r for r in judged if r["added_p50_ms"] <= ADDED_TARGET_MS]
    predicted = [r for r in rows if "prediction_error" in r]
    prediction_ok = [r for r in predicted if abs(r["prediction_error"]) <= PREDICTION_TARGET]
    worst_added = max(judged, key=lambda r: r["added_p50_ms"])
    worst_prediction = max(predicted, key=lambda r: abs(r["prediction_error"])) if predicted else None
    lines = [
        "## Targets (c1)",
        "",
        f"- added TTFP over pcm, p50, at most {ADDED_TARGET_MS:g} ms for mp3, aac, opus, flac, wav at speed 1 "
        f"and pcm at 0.8 and 1.5: **{len(added_ok)} of {len(judged)} met** (largest: {worst_added['format']} "
        f"x{worst_added['speed']:g}, {worst_added['added_p50_ms']:+.1f} ms)",
    ]
    others = [r for r in rows if r["format"] != "pcm" and r["speed"] != 1.0]
    if others:
        worst_other = max(others, key=lambda r: r["added_p50_ms"])
        lines.append(
            f"- the same bound in the {len(others)} other cells (a format at a speed other than 1, beyond the "
            f"target): {sum(r['added_p50_ms'] <= ADDED_TARGET_MS for r in others)} of {len(others)} within it "
            f"(largest: {worst_other['format']} x{worst_other['speed']:g}, {worst_other['added_p50_ms']:+.1f} ms)"
        )
    if worst_prediction is not None:
        lines.append(
            f"- predicted TTFP header within {PREDICTION_TARGET:.0%} of the measured TTFP (p50), every format "
            f"and speed: **{len(prediction_ok)} of {len(predicted)} met** (largest: {worst_prediction['format']} "
            f"x{worst_prediction['speed']:g}, {worst_prediction['prediction_error'] * 100:+.1f}%)"
        )
    decoded = [r for r in rows if r["format"] != "pcm" and "decoded_over_pcm_max_ms" in r]
    if decoded:
        within = [r for r in decoded if abs(r["decoded_over_pcm_max_ms"]) <= DECODED_TARGET_MS]
        worst = max(decoded, key=lambda r: abs(r["decoded_over_pcm_max_ms"]))
        lines.append(
            f"- decoded length within one codec frame ({DECODED_TARGET_MS:g} ms) of pcm's at the same speed and "
            f"text, every stream (PyAV, as a client decodes; mp3 and aac decoders play their encoders' priming "
            f"and padding and the early start's pause, which the gateway takes back from the quiet the speech "
            f"ends in): **{len(within)} of {len(decoded)} met** "
            f"(furthest: {worst['format']} x{worst['speed']:g}, {worst['decoded_over_pcm_max_ms']:+.1f} ms)"
        )
    return [*lines, ""]


def write_report(document: dict[str, Any], path: Path) -> Path:
    method = (__doc__ or "").split("\n\n", 1)[1].strip()
    if document.get("schema") != SCHEMA:
        method += (
            "\n\nThis run predates the decoded-length measurement: each c1 request drew its own text and "
            "no stream was decoded."
        )
    lines = [
        "# First audio per format and speed",
        "",
        method,
        "",
        (
            f"Command: `{document['command'].strip()}` ({document['machine']}; 1-minute load average "
            f"{document['load_before']} before, "
            + ", ".join(f"{level} {load}" for level, load in document["load_after"].items())
            + " after each level: other jobs shared the machine when it is above 1)."
        ),
        "",
        *_targets(document["levels"].get("c1", [])),
    ]
    for level, rows in document["levels"].items():
        prediction = level == "c1"
        lines += [f"## {level}", ""]
        head = "| format | speed | TTFP p50 | TTFP p99 | added over pcm p50 | added p99 |"
        rule = "|---|---:|---:|---:|---:|---:|"
        durations = any("decoded_over_pcm_max_ms" in row for row in rows)
        if prediction:
            head += " predicted p50 | predicted / measured - 1 |"
            rule += "---:|---:|"
        if durations:
            head += " decoded over pcm p50 | decoded over pcm, furthest |"
            rule += "---:|---:|"
        lines += [head, rule]
        for row in rows:
            line = (
                f"| {row['format']} | {row['speed']:g} | {row['ttfp_p50_ms']:.0f} ms | {row['ttfp_p99_ms']:.0f} ms "
                f"| {row['added_p50_ms']:+.1f} ms | {row['added_p99_ms']:+.1f} ms |"
            )
            if prediction and "predicted_p50_ms" in row:
                line += f" {row['predicted_p50_ms']:.0f} ms | {row['prediction_error'] * 100:+.1f}% |"
            if durations and "decoded_over_pcm_max_ms" in row:
                line += f" {row['decoded_over_pcm_p50_ms']:+.1f} ms | {row['decoded_over_pcm_max_ms']:+.1f} ms |"
            if row["errors"]:
                line += f" ({row['errors']} failed)"
            lines.append(line)
        lines.append("")
    path.write_text("\n".join(lines))
    return path
