"""What the audio quality sampler costs the gateway: CPU at c64, sampling every stream.

    python -m gateway.bench.quality_cost --out docs/benchmarks/quality

One emulated low-latency and one high-throughput worker, and three gateways in front of the
same workers, identical but for ``quality``: off, the default (``sample_share: 0.1``), and
every completed stream scored (``sample_share: 1.0``, the worst case). Closed-loop rounds at
c64 take the gateways in turn (the order rotating each round, the same seeded texts for all
three in a round), and each round counts its gateway process's CPU seconds (threads
included, so the scoring thread too). A setup's overhead is its CPU per request over the CPU
per request with quality off, less one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.client import ClientOptions, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, cpu_seconds, free_port
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.runner import run_closed
from gateway.bench.texts import text_order

SAMPLES = "higgs_gateway_quality_samples_total"
EJECTIONS = "higgs_gateway_worker_ejections_total"
SETUPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("off", {"enabled": False}),
    ("default", {"enabled": True, "sample_share": 0.1}),
    ("every", {"enabled": True, "sample_share": 1.0}),
)
DROPPED = "higgs_gateway_quality_dropped_total"


def _metric_sum(text: str, prefix: str) -> float:
    """The sum of every sample whose line starts with ``prefix`` (a name, or a name and labels)."""
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith(prefix if "{" in prefix else prefix + "{") or line.startswith(prefix + " ")
    )  # fmt: skip


def _quality_ejections(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(EJECTIONS + "{") and 'reason="quality"' in line)


async def _round(url: str, pid: int, specs: list[RequestSpec], concurrency: int) -> dict[str, float]:
    client = make_client("aiohttp", ClientOptions(url=url))
    try:
        before, start = cpu_seconds(pid), time.perf_counter()
        phase = await run_closed(client, specs, concurrency, "c64")
        cpu, wall = cpu_seconds(pid) - before, time.perf_counter() - start
    finally:
        await client.close()
    ok = sum(1 for r in phase.results if r.ok)
    return {"requests": len(specs), "ok": ok, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "cpu_ms_per_request": round(1000 * cpu / max(ok, 1), 3)}  # fmt: skip


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    with Fleet(work) as fleet:
        # The synthetic voice: eSpeak rendering 64 streams would only slow the workers down.
        ll = fleet.emulator("ll", LL_PROFILE, args.time_scale, extra=["--synthetic-audio"])
        ht = fleet.emulator("ht", HT_PROFILE, args.time_scale, extra=["--synthetic-audio", "--warm"])
        gateways = {}
        for name, quality in SETUPS:
            port = free_port()
            document = gateway_document(port, work / f"data-{name}", [ll.url], [ht.url], "adaptive", args.time_scale)
            document["quality"] = {**quality, "probe_interval_s": 0}
            config = write_config(document, work / f"gateway-{name}.yaml")
            gateways[name] = fleet.gateway(f"gateway-{name}", config, port, ready_path="/ready")
        names = [name for name, _ in SETUPS]
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for index in range(args.rounds):
            specs = [RequestSpec(text) for text in text_order(args.requests, index)]
            for name in names[index % 3 :] + names[: index % 3]:
                service = gateways[name]
                rounds[name].append(asyncio.run(_round(service.url, service.pid, specs, args.concurrency)))
        scored = {name: _metric_sum(httpx.get(gateways[name].url + "/metrics", timeout=10).text, SAMPLES) for name in names[1:]}
        dropped = {name: _metric_sum(httpx.get(gateways[name].url + "/metrics", timeout=10).text, DROPPED) for name in names[1:]}
        ejected = {name: _quality_ejections(httpx.get(gateways[name].url + "/metrics", timeout=10).text) for name in names}
    per_request = {name: sum(r["cpu_s"] for r in rs) / max(1, sum(r["ok"] for r in rs)) for name, rs in rounds.items()}
    return {
        "command": "python -m gateway.bench.quality_cost " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "concurrency": args.concurrency, "requests_per_round": args.requests, "rounds": args.rounds,
        "time_scale": args.time_scale, "python": platform.python_version(),
        "rounds_by_setup": rounds,
        "cpu_ms_per_request": {name: round(1000 * value, 3) for name, value in per_request.items()},
        "overhead": {name: round(per_request[name] / per_request["off"] - 1.0, 4) for name in per_request if name != "off"},
        "scored": scored, "dropped": dropped, "quality_ejections": ejected,
    }  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Audio quality sampling: its CPU cost at c64", "",
        f"Reproduce: `{result['command']}`", "",
        "Measured on a shared 2-core machine that other engineers' jobs were using at the same time; the load "
        "generator and both emulated workers ran on the same cores as the gateways. Setups alternate round by "
        "round so both saw the same background load, but read the rounds' spread before the mean.", "",
        f"Closed loop at c{result['concurrency']}, {result['requests_per_round']} requests per round, "
        f"{result['rounds']} rounds per setup, emulated workers at time scale {result['time_scale']:g}; "
        "`default` scores a tenth of the completed streams per worker (`quality.sample_share: 0.1`), `every` "
        "scores them all (`1.0`).", "",
        "| setup | round | ok | gateway CPU (s) | wall (s) | CPU ms per request |", "|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name, rounds in result["rounds_by_setup"].items():
        for i, r in enumerate(rounds, 1):
            lines.append(f"| {name} | {i} | {r['ok']} | {r['cpu_s']} | {r['wall_s']} | {r['cpu_ms_per_request']} |")
    cpu = result["cpu_ms_per_request"]
    lines += ["", "| setup | CPU ms per request | over `off` | streams scored | dropped (scorer busy) |", "|---|---:|---:|---:|---:|",
              f"| off | {cpu['off']} | – | – | – |"]  # fmt: skip
    for name, overhead in result["overhead"].items():
        lines.append(f"| {name} | {cpu[name]} | **{100 * overhead:+.1f}%** | {result['scored'][name]:.0f} | {result['dropped'][name]:.0f} |")
    ejections = sum(result["quality_ejections"].values())
    lines += ["", f"Quality ejections in the run: {ejections:.0f} (clean workers: none expected).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.quality_cost", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-out/quality"))
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quality-cost-") as work:  # logs, configs, data dirs
        result = run(args, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "cost.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
