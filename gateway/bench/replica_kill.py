"""SIGKILL of one of three gateway replicas under load: ``higgs-gateway bench replica-kill``.

One low-latency + one high-throughput emulated worker, three gateway replicas on one
Redis (the shared in-flight view), ``--concurrency`` callers sending back-to-back, each
request to the next live replica in turn (a load balancer that drops a dead upstream at
once). After ``--before`` wall seconds one replica is killed with SIGKILL; the load goes
on for ``--after`` seconds. Reported:

- requests that failed on the survivors (must be none; the dead replica's own are lost);
- when the dead replica's leases left each survivor's view: polled every 50 ms, a
  survivor's count of other replicas' leases against what the other survivor holds
  (within one request starting or ending between the two reads);
- audio-s/s (modelled) delivered in the last ``--before``/2 s before the kill against the
  time after the stated bound (``state.inflight_lease_ttl_s`` x 4/3) until the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.client import ClientOptions, RequestResult, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, Service, free_port, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.arguments import load_average
from gateway.bench.workload import TEXTS, text_order
from gateway.help_format import HelpFormatter
from gateway.types.codec import BYTES_PER_SECOND

ADMIN_TOKEN = "replica-kill-bench-admin-token"
LEASE_TTL_S = 3.0  # the gateway's default state.inflight_lease_ttl_s
BOUND_S = LEASE_TTL_S * 4 / 3  # expiry plus one heartbeat


@dataclass
class Sent:
    replica: int
    started_s: float  # since the run began
    result: RequestResult


@dataclass
class Run:
    killed_at_s: float = 0.0
    sent: list[Sent] = field(default_factory=list)
    cleared_after_s: dict[int, float | None] = field(default_factory=dict)  # survivor -> seconds after the kill


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench replica-kill", description=__doc__,
                                     formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/replica-kill.md"))
    parser.add_argument("--time-scale", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--before", type=float, default=40.0, help="wall seconds of load before the kill")
    parser.add_argument("--after", type=float, default=40.0, help="wall seconds of load after it")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _pools(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/pools", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=5)
    response.raise_for_status()
    return dict(response.json())


def _counts(url: str) -> tuple[int, int]:
    """(this replica's leases, the other replicas' it counts), over every worker."""
    pools = _pools(url)["pools"].values()
    own = sum(w["inflight"] for pool in pools for w in pool["workers"])
    others = sum(w.get("other_replicas_inflight") or 0 for pool in pools for w in pool["workers"])
    return own, others


async def _watch_leases(urls: dict[int, str], run: Run, stop: asyncio.Event) -> None:
    """After the kill: the first moment each survivor counts no lease but the other survivor's."""
    a, b = sorted(urls)
    while not stop.is_set() and any(v is None for v in run.cleared_after_s.values()):
        (own_a, others_a), (own_b, others_b) = await asyncio.gather(
            asyncio.to_thread(_counts, urls[a]), asyncio.to_thread(_counts, urls[b])
        )
        now = time.perf_counter() - run.killed_at_s
        for survivor, others, theirs in ((a, others_a, own_b), (b, others_b, own_a)):
            if run.cleared_after_s[survivor] is None and abs(others - theirs) <= 1:
                run.cleared_after_s[survivor] = now
        await asyncio.sleep(0.05)


async def _load(urls: list[str], gateways: list[Service], args: argparse.Namespace) -> Run:
    clients = [make_client("aiohttp", ClientOptions(url=url)) for url in urls]
    texts = text_order(4096, args.seed, TEXTS)
    alive = list(range(len(urls)))
    run, turn, stop = Run(), 0, asyncio.Event()
    start = time.perf_counter()

    async def caller(index: int) -> None:
        nonlocal turn
        while not stop.is_set():
            replica = alive[turn % len(alive)]
            turn += 1
            spec = RequestSpec(texts[(index * 131 + turn) % len(texts)])
            sent = time.perf_counter() - start
            result = await clients[replica].speak(spec, start)
            run.sent.append(Sent(replica, sent, result))

    callers = [asyncio.create_task(caller(i)) for i in range(args.concurrency)]
    await asyncio.sleep(args.before)
    victim = len(gateways) - 1
    alive.remove(victim)
    os.kill(gateways[victim].pid, signal.SIGKILL)
    run.killed_at_s = time.perf_counter()
    survivors = {i: urls[i] for i in alive}
    run.cleared_after_s = dict.fromkeys(survivors)
    watcher = asyncio.create_task(_watch_leases(survivors, run, stop))
    await asyncio.sleep(args.after)
    stop.set()
    await asyncio.gather(*callers, watcher)
    run.killed_at_s -= start
    for client in clients:
        await client.close()
    return run


def _delivered(run: Run, start_s: float, end_s: float, time_scale: float) -> float:
    """Modelled audio-s/s received between two instants (every chunk counted when it arrived)."""
    total = 0
    for sent in run.sent:
        for offset, size in sent.result.chunks:
            if start_s <= sent.started_s + offset < end_s:
                total += size
    return total / BYTES_PER_SECOND / (end_s - start_s) * time_scale


def _report(run: Run, args: argparse.Namespace, loads: list[float]) -> str:
    end = run.killed_at_s + args.after
    before = _delivered(run, run.killed_at_s - args.before / 2, run.killed_at_s, args.time_scale)
    after = _delivered(run, run.killed_at_s + BOUND_S, end, args.time_scale)
    victim = max(s.replica for s in run.sent)
    survivors = [s for s in run.sent if s.replica != victim]
    failed = [s for s in survivors if not s.result.ok]
    lost = [s for s in run.sent if s.replica == victim and not s.result.ok]
    cleared = {k: "not within the run" if v is None else f"{v:.2f} s" for k, v in run.cleared_after_s.items()}
    ratio = after / before if before else float("nan")
    lines = [
        "# SIGKILL of one of three gateway replicas under load",
        "",
        f"Reproduce: `higgs-gateway bench replica-kill {shlex.join(sys.argv[3:])}`",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        f"Concurrency {args.concurrency}, time scale {args.time_scale:g}, killed after {args.before:g} s, "
        f"{args.after:g} s after; stated bound {BOUND_S:.1f} s (lease TTL {LEASE_TTL_S:g} s + one heartbeat).",
        "",
        "| | measured | target | met |",
        "|---|---:|---|:---:|",
        f"| requests on the survivors that failed | {len(failed)} of {len(survivors)} | 0 | "
        f"{'yes' if not failed else '**no**'} |",
        *[f"| dead replica's leases gone from survivor {k + 1}'s view after | {v} | <= {BOUND_S:.1f} s | "
          f"{'yes' if run.cleared_after_s[k] is not None and run.cleared_after_s[k] <= BOUND_S else '**no**'} |"
          for k, v in cleared.items()],
        f"| audio-s/s after the bound / before the kill | {after:.1f} / {before:.1f} = {ratio:.1%} | >= 95% | "
        f"{'yes' if ratio >= 0.95 else '**no**'} |",
        "",
        f"Requests in flight on the killed replica lost: {len(lost)} (the load balancer's to retry). "
        f"Failures on the survivors: {', '.join(sorted({s.result.error or '' for s in failed})) or 'none'}.",
        "",
        f"Machine: {os.cpu_count()}-core {os.uname().machine}, shared with other work: load average "
        f"{min(loads):.1f}-{max(loads):.1f} during the run; emulated workers, gateways, Redis and the load "
        "generator share it.",
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="higgs-replica-kill-") as scratch, Fleet(Path(scratch)) as fleet:
        ll = fleet.emulator("ll", LL_PROFILE, args.time_scale, extra=["--warm"])
        ht = fleet.emulator("ht", HT_PROFILE, args.time_scale, extra=["--warm"])
        redis_url = fleet.redis()
        gateways, urls = [], []
        for index in range(1, 4):
            port = free_port()
            document = gateway_document(port, Path(scratch) / f"data{index}", [ll.url], [ht.url], "adaptive",
                                        args.time_scale, admin_token=ADMIN_TOKEN)  # fmt: skip
            document["state"] = {"backend": "redis", "redis_url": redis_url, "inflight_lease_ttl_s": LEASE_TTL_S}
            gateway = fleet.gateway(f"gateway{index}", write_config(document, Path(scratch) / f"g{index}.yaml"), port)
            wait_speech(gateway.url)
            gateways.append(gateway)
            urls.append(gateway.url)
        run = asyncio.run(_load(urls, gateways, args))
        loads.append(load_average())
    report = _report(run, args, loads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    (args.out.with_suffix(".json")).write_text(json.dumps({
        "killed_at_s": run.killed_at_s, "cleared_after_s": run.cleared_after_s,
        "requests": [{"replica": s.replica, "sent_s": s.started_s, "error": s.result.error,
                      "audio_s": s.result.audio_s} for s in run.sent],
    }, indent=1) + "\n")  # fmt: skip
    print(report)
    return 0
