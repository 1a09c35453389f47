"""Audio quality sampling, measured: what it costs the gateway, and that a clean fleet is never ejected.

    higgs-gateway bench quality-cost --out docs/benchmarks/quality
    higgs-gateway bench quality-soak --seconds 600 --out docs/benchmarks/quality

``quality-cost``: one emulated low-latency and one high-throughput worker, and three gateways
in front of the same workers, identical but for ``quality``: off, the default
(``sample_share: 0.1``, at most ``max_per_s: 1`` a second per worker), and every completed stream
scored (``sample_share: 1.0``, ``max_per_s: 0``: the worst case). Closed-loop rounds at c64 take the gateways in turn (the order rotating each round, the
same seeded texts for all three in a round), and each round counts its gateway process's CPU
seconds (threads included, so the scoring thread too). A setup's overhead is its CPU per
request over the CPU per request with quality off, less one.

``quality-soak``: the same two workers (eSpeak voice, no fault) behind a gateway that scores
every completed stream; ``latency`` requests at c16 for ``--seconds`` of wall time (low-latency
carries up to 16 at once, the rest spills to high-throughput). The result is every verdict
counted by pool and decode batch, the drops, and the quality ejections: the false positives,
which must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
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
from gateway.bench.scenarios import run_closed, run_closed_until
from gateway.bench.workload import text_order
from gateway.types import SlaClass

SAMPLES = "higgs_gateway_quality_samples_total"
EJECTIONS = "higgs_gateway_worker_ejections_total"
SETUPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("off", {"enabled": False}),
    ("default", {"enabled": True, "sample_share": 0.1}),  # max_per_s: its default, 1
    ("every", {"enabled": True, "sample_share": 1.0, "max_per_s": 0}),
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


def run_cost(args: argparse.Namespace, work: Path) -> dict[str, Any]:
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
        "command": "higgs-gateway bench quality-cost " + args.command_line,
        "concurrency": args.concurrency, "requests_per_round": args.requests, "rounds": args.rounds,
        "time_scale": args.time_scale, "python": platform.python_version(),
        "rounds_by_setup": rounds,
        "cpu_ms_per_request": {name: round(1000 * value, 3) for name, value in per_request.items()},
        "overhead": {name: round(per_request[name] / per_request["off"] - 1.0, 4) for name in per_request if name != "off"},
        "scored": scored, "dropped": dropped, "quality_ejections": ejected,
    }  # fmt: skip


def cost_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Audio quality sampling: its CPU cost at c64", "",
        f"Reproduce: `{result['command']}`", "",
        "Measured on a shared 2-core machine that other engineers' jobs were using at the same time; the load "
        "generator and both emulated workers ran on the same cores as the gateways. Setups alternate round by "
        "round so both saw the same background load, but read the rounds' spread before the mean.", "",
        f"Closed loop at c{result['concurrency']}, {result['requests_per_round']} requests per round, "
        f"{result['rounds']} rounds per setup, emulated workers at time scale {result['time_scale']:g}; "
        "`default` scores a tenth of the completed streams per worker (`quality.sample_share: 0.1`), at most "
        "one a second (`max_per_s: 1`); `every` scores them all (`1.0`, no cap).", "",
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


def main_cost(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench quality-cost", description="What audio quality sampling costs the gateway's CPU at c64.")
    parser.add_argument("--out", type=Path, default=Path("bench-out/quality"))
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args(argv)
    args.command_line = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    with tempfile.TemporaryDirectory(prefix="quality-cost-") as work:  # logs, configs, data dirs
        result = run_cost(args, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "cost.md").write_text(cost_markdown(result))
    print(cost_markdown(result))
    return 0


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


def run_soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    with Fleet(work) as fleet:
        ll = fleet.emulator("ll", LL_PROFILE, args.time_scale)
        ht = fleet.emulator("ht", HT_PROFILE, args.time_scale, extra=["--warm"])
        port = free_port()
        document = gateway_document(port, work / "data", [ll.url], [ht.url], "adaptive", args.time_scale)
        document["quality"] = {"sample_share": 1.0, "max_per_s": 0, "probe_interval_s": 0}
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
        "command": "higgs-gateway bench quality-soak " + args.command_line,
        "seconds": args.seconds, "wall_s": round(wall, 1), "concurrency": args.concurrency, "time_scale": args.time_scale,
        "load": load, "verdicts": verdicts, "dropped": dropped, "ejections": ejections,
        "quality_false_positives": sum(v for k, v in ejections.items() if k.endswith(": quality")),
    }  # fmt: skip


def soak_markdown(result: dict[str, Any]) -> str:
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


def main_soak(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench quality-soak", description="A soak of a clean fleet with every stream scored: quality ejections must be 0.")
    parser.add_argument("--out", type=Path, default=Path("bench-out/quality"))
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--time-scale", type=float, default=0.5)
    args = parser.parse_args(argv)
    args.command_line = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    with tempfile.TemporaryDirectory(prefix="quality-soak-") as work:
        result = run_soak(args, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "soak.md").write_text(soak_markdown(result))
    print(soak_markdown(result))
    return 0 if result["quality_false_positives"] == 0 else 1
