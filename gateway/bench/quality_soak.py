"""A clean fleet under load is never ejected for its audio: a soak with every stream scored.

    python -m gateway.bench.quality_soak --seconds 600 --out docs/benchmarks/quality

One emulated low-latency and one high-throughput worker (eSpeak voice, no fault) behind a
gateway that scores every completed stream (``quality.sample_share: 1.0``); ``latency``
requests at c16 for ``--seconds`` of wall time (low-latency carries up to 16 at once, the
rest spills to high-throughput). The result is every verdict counted by pool and decode
batch, the drops, and the quality ejections: the false positives, which must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.client import ClientOptions, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, free_port
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.runner import run_closed_until
from gateway.bench.texts import text_order
from gateway.types import SlaClass

SAMPLE = re.compile(r'^higgs_gateway_quality_samples_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)
EJECTION = re.compile(r'^higgs_gateway_worker_ejections_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


def _labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


async def _load(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    client = make_client("aiohttp", ClientOptions(url=url))
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, stop.set)
    specs = [RequestSpec(text, SlaClass.LATENCY) for text in text_order(512, 7)]
    try:
        phase = await run_closed_until(client, specs, concurrency, "soak", stop)
    finally:
        await client.close()
    return {"requests": len(phase.results), "ok": sum(1 for r in phase.results if r.ok),
            "errors": sorted({r.error for r in phase.results if r.error})}  # fmt: skip


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    with Fleet(work) as fleet:
        ll = fleet.emulator("ll", LL_PROFILE, args.time_scale)
        ht = fleet.emulator("ht", HT_PROFILE, args.time_scale, extra=["--warm"])
        port = free_port()
        document = gateway_document(port, work / "data", [ll.url], [ht.url], "adaptive", args.time_scale)
        document["quality"] = {"sample_share": 1.0, "probe_interval_s": 0}
        gateway = fleet.gateway("gateway", write_config(document, work / "gateway.yaml"), port, ready_path="/ready")
        started = time.monotonic()
        load = asyncio.run(_load(gateway.url, args.seconds, args.concurrency))
        wall = time.monotonic() - started
        time.sleep(2.0)  # the scorer's last clips
        text = httpx.get(gateway.url + "/metrics", timeout=10).text
    verdicts: dict[str, dict[str, float]] = {}
    for match in SAMPLE.finditer(text):
        labels = _labels(match["labels"])
        key = f"{labels['pool']} batch {labels['batch']}"
        verdicts.setdefault(key, {})[labels["verdict"]] = verdicts.get(key, {}).get(labels["verdict"], 0.0) + float(match["value"])
    ejections = {
        f"{_labels(m['labels'])['pool']}: {_labels(m['labels'])['reason']}": float(m["value"])
        for m in EJECTION.finditer(text) if float(m["value"]) > 0
    }  # fmt: skip
    dropped = sum(float(v) for v in re.findall(r"^higgs_gateway_quality_dropped_total (\S+)$", text, re.M))
    return {
        "command": "python -m gateway.bench.quality_soak " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "seconds": args.seconds, "wall_s": round(wall, 1), "concurrency": args.concurrency, "time_scale": args.time_scale,
        "load": load, "verdicts": verdicts, "dropped": dropped, "ejections": ejections,
        "quality_false_positives": sum(v for k, v in ejections.items() if k.endswith(": quality")),
    }  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    scored = sum(sum(v.values()) for v in result["verdicts"].values())
    ok = sum(v.get("ok", 0.0) for v in result["verdicts"].values())
    lines = [
        "# Audio quality: a clean fleet under load, soaked", "",
        f"Reproduce: `{result['command']}`", "",
        "Measured on a shared 2-core machine that other engineers' jobs were using at the same time (the load "
        "generator, both emulated workers and the gateway on the same cores).", "",
        f"{result['seconds']:g} s of `latency` requests at c{result['concurrency']} (wall {result['wall_s']} s), emulated "
        f"workers at time scale {result['time_scale']:g} with the eSpeak voice and no fault, every completed stream "
        "scored (`quality.sample_share: 1.0`).", "",
        f"Requests: {result['load']['requests']}, ok {result['load']['ok']}"
        + (f" (errors: {', '.join(result['load']['errors'])})" if result["load"]["errors"] else "") + ".", "",
        "| pool and decode batch | verdicts |", "|---|---|",
        *[f"| {key} | {', '.join(f'{k} {v:.0f}' for k, v in sorted(value.items()))} |" for key, value in sorted(result["verdicts"].items())],
        "",
        f"Scored {scored:.0f}, ok {ok:.0f}; dropped because the scorer was busy: {result['dropped']:.0f}. "
        f"Ejections: {result['ejections'] or 'none'}. **Quality false positives: {result['quality_false_positives']:.0f}.**", "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.quality_soak", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-out/quality"))
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--time-scale", type=float, default=0.5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quality-soak-") as work:
        result = run(args, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "soak.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["quality_false_positives"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
