"""``higgs-gateway bench profile-changes``: a GPU changing profile as the load changes.

Three fleets of two emulated workers (two GPUs' worth), one run (one run id):

- ``ht+ht``: two high-throughput workers, static; sustained closed-loop c64, the audio
  delivered over a measurement window;
- ``adaptive``: one low-latency + one high-throughput worker, static; closed-loop c1..c4
  (TTFP);
- ``changing``: one low-latency + one high-throughput worker started by the gateway's
  supervisor (each emulator waits its profile's modelled start-up, ``--model-startup``),
  ``supervisor.profile_changes`` on, following the gateway's own planner (``--mix planner``,
  the default) or the mix the load calls for, held by the benchmark (``--mix load``). Sustained
  c64 until the fleet is two high-throughput workers, then the same window as ``ht+ht``;
  then the load falls to c4 until a low-latency worker is back, then the same c1..c4 as
  ``adaptive``. Every change is recorded (start, end, result) and every request counted.

The report (targets judged, tables, timeline plot, JSON) goes to ``--out``. Durations are
in modelled seconds and compressed by ``--time-scale``, as the other benchmarks.

``higgs-gateway bench held-mix --config FILE --mix MIX.json`` (the ``--mix load`` gateway)
serves exactly as ``higgs-gateway serve --config FILE``, except that the supervisor's profile changes follow
the mix in MIX.json (``{"low_latency": 1, "high_throughput": 1}``) instead of the planner's:
``bench profile-changes --mix load`` holds the mix its load calls for, so what it measures
is the change itself, not the planner's judgement. A missing or unreadable file: no judgement.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway import serve
from gateway.bench import report
from gateway.bench.arguments import add_quiet_arguments, int_list, wait_for_quiet
from gateway.bench.client import ClientOptions, RequestResult, RequestSpec
from gateway.bench.compare import SETUPS, Setup, start_setup, timing_parameters
from gateway.bench.fleet import Fleet, free_port, wait_http
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.report import whole
from gateway.bench.scenarios import RunOptions, run_async, run_closed_until, sweep, warm_up
from gateway.bench.summary import PhaseResult, audio_rate, failed_during, on_run_clock, windows
from gateway.bench.targets import ADAPTIVE, HT as HT_SETUP, RUN_ID, Target, new_run_id
from gateway.bench.workload import text_order
from gateway.config import ConfigError, GatewayConfig, PlannerConfig, load_config
from gateway.help_format import HelpFormatter

SCHEMA = "higgs-gateway-bench-profile-changes/1"
CHANGING = "changing"
ADMIN_TOKEN = "bench-admin-token-local"  # the gateway listens on 127.0.0.1 only, for this run
POLL_S = 0.5  # wall seconds between two looks at the changing fleet (each costs the gateway a little CPU)
HELD_MIX_CLI = [sys.executable, "-m", "gateway", "bench", "held-mix"]
SEEDED_MIX = {"low_latency": 1, "high_throughput": 1}  # the fleet's start: nothing to change
HIGH_LOAD_MIX = {"low_latency": 0, "high_throughput": 2}
Hold = Callable[[dict[str, int]], None]  # sets the desired mix the gateway's profile changes follow
TIMELINE_WINDOW_S = 10.0  # modelled seconds per timeline row
ROUNDS, MINIMUM = 4, 32  # requests per low-load level: max(32, 4 x level), as bench compare
HT_SHARE = 0.97  # of a static 2 x high-throughput fleet's c64 audio-s/s, after the changes
TTFP_P50_SLACK = 1.10  # low-load TTFP p50 after the change back, against the static adaptive fleet
LL, HT = "low_latency", "high_throughput"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("profile-changes", help="a GPU changing profile under changing load, one report",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/profile-changes"))
    parser.add_argument("--time-scale", type=float, default=0.25, help="emulator speed-up (0.25 = four times real time)")
    parser.add_argument("--concurrency", type=int, default=64, help="the sustained high load (closed loop)")
    parser.add_argument("--low-concurrency", type=int, default=4, help="the load while waiting for the change back")
    parser.add_argument("--levels", default="1,2,3,4", help="low-load levels measured after the change back")
    parser.add_argument("--requests", type=int, default=None, help="requests per low-load level (default max(32, 4 x level))")
    # The streams the one remaining worker queued during the change take about a minute to
    # drain before the new worker carries its half: the window starts after that.
    parser.add_argument("--settle", type=float, default=60.0, help="modelled seconds of c64 before the window")
    parser.add_argument("--window", type=float, default=120.0, help="c64 measurement window, modelled seconds")
    parser.add_argument("--change-timeout", type=float, default=1200.0,
                        help="longest wait for each change, modelled seconds (then the target is missed)")
    parser.add_argument("--hold", type=float, default=60.0, help="profile_changes.hold_s, modelled seconds")
    parser.add_argument("--change-interval", type=float, default=5.0, help="profile_changes.interval_s, modelled")
    parser.add_argument("--drain-grace", type=float, default=120.0, help="profile_changes.drain_grace_s, modelled")
    parser.add_argument("--smoothing", type=float, default=60.0, help="planner.smoothing_s, modelled seconds")
    parser.add_argument("--planner-interval", type=float, default=5.0, help="planner.interval_s, modelled seconds")
    parser.add_argument("--mix", choices=("planner", "load"), default="planner",
                        help="who decides the mix: 'planner': the gateway's own planner (as in production); 'load' "
                             "holds the one the load calls for (2 high-throughput under sustained load, 1 + 1 once "
                             "it falls), to measure the change alone")
    parser.add_argument("--utilisation", type=float, default=0.5,
                        help="planner.target_utilisation (at 0.8 one high-throughput worker is judged enough for c64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    add_quiet_arguments(parser, before="before each fleet")
    parser.add_argument("--report-only", action="store_true", help="re-render README.md from the JSON in --out")
    parser.set_defaults(func=run)


def _setup(name: str) -> Setup:
    return next(s for s in SETUPS if s.name == name)


def run(args: argparse.Namespace) -> int:
    if args.time_scale <= 0 or args.window <= 0 or args.settle < 0:
        raise SystemExit("--time-scale and --window must be positive, --settle not negative")
    path = args.out / "profile-changes.json"
    if args.report_only:  # the targets judged again, as this checkout judges them
        document = json.loads(path.read_text())
        document["targets"] = [dataclasses.asdict(t) for t in evaluate(document)]
        path.write_text(json.dumps(document, indent=2) + "\n")
        write_report(document, args.out)
        return 0
    run_id = new_run_id()
    notes = {"command": _command(), RUN_ID: run_id}
    levels = int_list(args.levels)
    with tempfile.TemporaryDirectory(prefix="higgs-bench-") as scratch:
        wait_for_quiet(args.quiet_load, args.quiet_wait)
        ht = _reference_ht(Path(scratch) / "ht_ht", args, notes)
        wait_for_quiet(args.quiet_load, args.quiet_wait)
        adaptive = _reference_adaptive(Path(scratch) / "adaptive", args, notes, levels)
        wait_for_quiet(args.quiet_load, args.quiet_wait)
        changing = _changing_fleet(Path(scratch) / CHANGING, args, notes, levels)
    document = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": adaptive["sweep"]["machine"],
        "time_scale": args.time_scale,
        "notes": {**notes, "emulator_timing": timing_parameters()},
        "params": _params(args, levels),
        "references": {HT_SETUP: ht, ADAPTIVE: adaptive},
        "changing": changing,
    }
    document["targets"] = [dataclasses.asdict(t) for t in evaluate(document)]
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    readme = write_report(document, args.out)
    print("\n".join(_targets_lines(document)))
    print(f"wrote {path}, {readme}", file=sys.stderr)
    return 0


def _command() -> str:
    return "higgs-gateway bench " + " ".join(shlex.quote(a) for a in sys.argv[2:] if a != "--report-only")


def _params(args: argparse.Namespace, levels: list[int]) -> dict[str, Any]:
    return {
        "concurrency": args.concurrency, "low_concurrency": args.low_concurrency, "levels": levels,
        "requests": args.requests or f"max({MINIMUM}, {ROUNDS} x level)", "settle_s": args.settle,
        "window_s": args.window, "change_timeout_s": args.change_timeout, "hold_s": args.hold,
        "change_interval_s": args.change_interval, "drain_grace_s": args.drain_grace,
        "smoothing_s": args.smoothing, "planner_interval_s": args.planner_interval,
        "target_utilisation": args.utilisation, "seed": args.seed, "mix": args.mix,
    }  # fmt: skip


def _options(url: str, label: str, args: argparse.Namespace, notes: dict[str, Any]) -> RunOptions:
    return RunOptions(ClientOptions(url=url), label, time_scale=args.time_scale, seed=args.seed,
                      progress=not args.no_progress, notes=dict(notes))  # fmt: skip


def _specs(seed: int) -> list[RequestSpec]:
    """What a sustained loop cycles through: the benchmark's texts in one seeded order."""
    return [RequestSpec(text) for text in text_order(256, seed)]


def _requests(results: Sequence[RequestResult]) -> dict[str, Any]:
    errors = Counter(r.error for r in results if r.error)
    return {"sent": len(results), "failed": sum(errors.values()), "errors": dict(sorted(errors.items()))}


# ---- the references ------------------------------------------------------------------------
def _reference_ht(work_dir: Path, args: argparse.Namespace, notes: dict[str, Any]) -> dict[str, Any]:
    """Two static high-throughput workers: the audio-s/s of sustained c64 over the window."""
    with Fleet(work_dir) as fleet:
        options = _options(start_setup(fleet, _setup(HT_SETUP), args.time_scale), HT_SETUP, args, notes)
        run_async(warm_up(options, args.concurrency))
        return run_async(_sustained_window(options, args))


async def _sustained_window(options: RunOptions, args: argparse.Namespace) -> dict[str, Any]:
    scale = args.time_scale
    client = options.open_client()
    stop = asyncio.Event()
    try:
        origin = options.clock()
        load = asyncio.create_task(run_closed_until(client, _specs(args.seed), args.concurrency,
                                                    f"c{args.concurrency}", stop, keep_chunks=True))  # fmt: skip
        await asyncio.sleep((args.settle + args.window) * scale)
        stop.set()
        phase = await load
    finally:
        await client.close()
    results = on_run_clock(phase, origin)
    start = args.settle * scale
    return {
        "setup": _setup(HT_SETUP).summary,
        "window": _window(results, start, args),
        "requests": _requests(results),
    }


def _window(results: Sequence[RequestResult], start_wall: float, args: argparse.Namespace) -> dict[str, Any]:
    scale = args.time_scale
    end = start_wall + args.window * scale
    return {"start_s": start_wall / scale, "length_s": args.window,
            "audio_s_per_s": audio_rate(results, start_wall, end, scale)}  # fmt: skip


def _reference_adaptive(work_dir: Path, args: argparse.Namespace, notes: dict[str, Any], levels: list[int]) -> dict[str, Any]:
    """One static low-latency + one high-throughput worker: the low-load levels."""
    with Fleet(work_dir) as fleet:
        options = _options(start_setup(fleet, _setup(ADAPTIVE), args.time_scale), ADAPTIVE, args, notes)
        run_async(warm_up(options, max(levels)))
        document = run_async(sweep(options, levels, args.requests, rounds=ROUNDS, minimum=MINIMUM))
    failed = sum(sum(phase["errors"].values()) for phase in document["phases"])
    sent = sum(phase["sent"] for phase in document["phases"])
    return {"setup": _setup(ADAPTIVE).summary, "sweep": document, "requests": {"sent": sent, "failed": failed}}


# ---- the changing fleet ----------------------------------------------------------------------
def changing_document(port: int, work_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The gateway config: both pools supervised (one GPU each), the planner deciding the
    mix, profile changes on. Every duration given in modelled seconds is scaled to wall."""
    scale = args.time_scale
    document = gateway_document(port, work_dir / "data", [], [], "adaptive", scale, admin_token=ADMIN_TOKEN)
    scratch = work_dir / "worker-tmp"  # each worker's scratch voice store, removed with the run
    scratch.mkdir(parents=True, exist_ok=True)
    for pool, gpu in ((LL, "0"), (HT, "1")):
        del document["pools"][pool]["workers"]
        document["pools"][pool]["launch"] = {
            "gpus": [gpu], "command": worker_command(scale), "env": {"TMPDIR": str(scratch)},
            # The modelled start-up (minutes on a GPU) plus the process's own, with room.
            "start_timeout_s": max(60.0, 600.0 * scale), "stop_timeout_s": 10.0,
        }  # fmt: skip
    defaults = PlannerConfig()
    document["planner"] = {
        "enabled": True,
        "interval_s": args.planner_interval * scale,
        "smoothing_s": args.smoothing * scale,
        "target_utilisation": args.utilisation,
        # The gateway learns its curves from wall-clock streams: objectives in the same units.
        "objectives": {sla.value: {"rtf": o.rtf * scale, "ttfp_s": None if o.ttfp_s is None else o.ttfp_s * scale}
                       for sla, o in defaults.objectives.items()},  # fmt: skip
        # Two GPUs: the planner may ask for either mix of them, never more.
        "pools": {LL: {"min": 0, "max": 1}, HT: {"min": 0, "max": 2}},
    }
    document["supervisor"] = {"profile_changes": {
        "enabled": True, "hold_s": args.hold * scale, "interval_s": args.change_interval * scale,
        "drain_grace_s": args.drain_grace * scale,
    }}  # fmt: skip
    GatewayConfig(**document)  # fail here, with the key path, rather than in the child process
    return document


def worker_command(time_scale: float) -> list[str]:
    """The emulator through vllm-omni's flags (the supervisor fills the placeholders), waiting
    its profile's modelled start-up before it listens, with the benchmark's synthetic audio."""
    return [
        sys.executable, "-m", "gateway", "emulate", "{model}", "--omni", "--trust-remote-code",
        "--deploy-config", "{profile}", "--host", "{host}", "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--log-stats", "--enable-server-load-tracking",
        "--time-scale", str(time_scale), "--synthetic-audio", "--model-startup",
    ]  # fmt: skip


def _changing_fleet(work_dir: Path, args: argparse.Namespace, notes: dict[str, Any], levels: list[int]) -> dict[str, Any]:
    port = free_port()
    config = write_config(changing_document(port, work_dir, args), work_dir / "gateway.yaml")
    held: list[dict[str, Any]] = []
    hold: Hold | None = None
    with Fleet(work_dir) as fleet:
        if args.mix == "load":
            mix_path = work_dir / "mix.json"
            write_mix(mix_path, SEEDED_MIX)

            def hold(mix: dict[str, int]) -> None:
                write_mix(mix_path, mix)
                held.append({"at_wall": time.perf_counter(), "mix": mix})

            command = [*HELD_MIX_CLI, "--config", str(config), "--mix", str(mix_path)]
            gateway = fleet.start("gateway", command, f"http://127.0.0.1:{port}", "/health")
        else:
            gateway = fleet.gateway("gateway", config, port)
        # Both supervised workers answered, were warmed and are routable.
        wait_http(gateway.url + "/ready?require=every_pool", max(120.0, 1200.0 * args.time_scale), gateway)
        options = _options(gateway.url, CHANGING, args, notes)
        return run_async(_change_and_measure(options, args, levels, hold, held))


@dataclass
class Sample:
    at_s: float  # wall, run clock
    routable: dict[str, int]
    in_progress: dict[str, Any] | None
    desired: dict[str, int] | None


@dataclass
class FleetWatcher:
    """Looks at the gateway's fleet (routable workers per pool, the change in progress) and
    the planner's desired mix every ``POLL_S``, for the waits and the timeline."""

    url: str
    origin: float
    clock: Callable[[], float]
    planner: bool  # also read the planner's desired mix (only when it decides: its answer is large)
    samples: list[Sample] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)  # finished, newest first
    decisions: Counter[str] = field(default_factory=Counter)  # "pool: reason" -> routing decisions so far

    async def run(self) -> None:
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10.0) as client:
            while True:
                try:
                    await self.look(client)
                except httpx.HTTPError:
                    pass  # a missed look is one sample fewer, not a failed run
                await asyncio.sleep(POLL_S)

    async def look(self, client: httpx.AsyncClient) -> Sample:
        body = (await client.get("/admin/fleet")).json()
        planner = (await client.get("/admin/planner")).json() if self.planner else {}
        routable = {name: sum(1 for w in pool["workers"] if w["routable"]) for name, pool in body["pools"].items()}
        changes = body["profile_changes"]
        self.changes = changes["recent"]
        self.decisions = Counter({f"{d['pool']}: {d['reason']}": d["count"] for d in body.get("decisions", [])})
        sample = Sample(self.clock() - self.origin, routable, changes["in_progress"], planner.get("desired_workers"))
        self.samples.append(sample)
        return sample

    async def until(self, settled: Callable[[Sample], bool], timeout_s: float) -> float | None:
        """Wall time (run clock) of the first sample where ``settled`` holds; None on timeout."""
        deadline = self.clock() + timeout_s
        seen = len(self.samples)
        while self.clock() < deadline:
            for sample in self.samples[seen:]:
                if settled(sample):
                    return sample.at_s
            seen = len(self.samples)
            await asyncio.sleep(POLL_S / 2)
        return None

    def latest(self) -> dict[str, int]:
        return dict(self.samples[-1].routable) if self.samples else {}


def all_high_throughput(sample: Sample) -> bool:
    return sample.in_progress is None and sample.routable.get(LL, 0) == 0 and sample.routable.get(HT, 0) >= 2


def low_latency_back(sample: Sample) -> bool:
    return sample.in_progress is None and sample.routable.get(LL, 0) >= 1


async def _change_and_measure(options: RunOptions, args: argparse.Namespace, levels: list[int],
                              hold: Hold | None, held: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    scale, timeout = args.time_scale, args.change_timeout * args.time_scale
    origin, origin_unix = options.clock(), time.time()
    watcher = FleetWatcher(options.client.url, origin, options.clock, planner=hold is None)
    watching = asyncio.create_task(watcher.run())
    client = options.open_client()
    phases: list[PhaseResult] = []
    specs = _specs(args.seed)
    try:
        # Sustained high load until the mix it calls for is in place, then the window.
        if hold is not None:
            hold(HIGH_LOAD_MIX)
        stop = asyncio.Event()
        high = asyncio.create_task(run_closed_until(client, specs, args.concurrency, f"c{args.concurrency}", stop,
                                                    keep_chunks=True))  # fmt: skip
        reached = await watcher.until(all_high_throughput, timeout)
        window_start = (reached if reached is not None else options.clock() - origin) + args.settle * scale
        await asyncio.sleep(max(0.0, origin + window_start + args.window * scale - options.clock()))
        at_high = watcher.latest()
        wished_high = watcher.samples[-1].desired if watcher.samples else None
        stop.set()
        phases.append(await high)
        # The load falls: low concurrency until a low-latency worker is routable again.
        if hold is not None:
            hold(SEEDED_MIX)
        stop = asyncio.Event()
        low = asyncio.create_task(run_closed_until(client, specs, args.low_concurrency, f"c{args.low_concurrency}",
                                                   stop, keep_chunks=True))  # fmt: skip
        back = await watcher.until(low_latency_back, timeout)
        at_low = watcher.latest()
        stop.set()
        phases.append(await low)
        measured: list[PhaseResult] = []
        before = watcher.decisions.copy()
        document = await sweep(options, levels, args.requests, rounds=ROUNDS, minimum=MINIMUM, collect=measured)
        phases += measured
        await asyncio.sleep(2 * POLL_S)  # one more look, so the last level's decisions are in
        low_decisions = dict(sorted((watcher.decisions - before).items()))
    finally:
        await client.close()
        watching.cancel()
    results = [r for phase in phases for r in on_run_clock(phase, origin)]
    end = max((r.sent_s + (r.e2e_s or 0.0) for r in results), default=0.0)
    changes = [_change(c, origin_unix, scale) for c in reversed(watcher.changes)]
    spans = [(c["started_s"] * scale, (c["finished_s"] or end / scale) * scale) for c in changes]
    in_changes, failed_in_changes = failed_during(results, spans)
    return {
        "setup": f"1 low-latency + 1 high-throughput, supervised (--model-startup), profile changes following "
                 f"{'the mix the load calls for' if hold is not None else 'the planner'}, adaptive routing",
        "changes": changes,
        # The window is measured either way: without the change it shows what the fleet it had delivered.
        "to_ht": {"reached_s": None if reached is None else reached / scale, "routable": at_high,
                  "planner_desired": wished_high},
        "window": {**_window(phases[0].results, window_start, args), "after_change": reached is not None},
        "back": {"reached_s": None if back is None else back / scale, "routable": at_low,
                 "load_fell_at_s": (phases[1].started_at - origin) / scale},  # fmt: skip
        "sweep": document,
        # Why the gateway routed the low-load levels where it did (from GET /admin/fleet).
        "sweep_decisions": low_decisions,
        "sweep_started_s": (measured[0].started_at - origin) / scale if measured else None,
        "requests": {**_requests(results), "during_changes": {"sent": in_changes, "failed": failed_in_changes}},
        "samples": [_sample(s, scale) for s in watcher.samples],
        "held_mix": [{"at_s": (h["at_wall"] - origin) / scale, "mix": h["mix"]} for h in held],
        "timeline": windows(results, end, TIMELINE_WINDOW_S, scale),
    }


def _change(change: dict[str, Any], origin_unix: float, scale: float) -> dict[str, Any]:
    started = (change["started_at"] - origin_unix) / scale
    finished = None if change["finished_at"] is None else (change["finished_at"] - origin_unix) / scale
    return {
        "from_pool": change["from_pool"], "to_pool": change["to_pool"], "worker": change["worker"],
        "new_worker": change["new_worker"], "gpu": change["gpu"], "result": change["result"],
        "detail": change["detail"], "started_s": started, "finished_s": finished,
        "took_s": None if finished is None else finished - started,
    }  # fmt: skip


def _sample(sample: Sample, scale: float) -> dict[str, Any]:
    phase = None if sample.in_progress is None else sample.in_progress["phase"]
    return {"at_s": sample.at_s / scale, "routable": sample.routable, "change": phase, "desired": sample.desired}


# ---- the report --------------------------------------------------------------------------------
def _targets_lines(document: dict[str, Any]) -> list[str]:
    from gateway.bench.targets import Target

    return targets_table([Target(**t) for t in document["targets"]])


def _pools(counts: dict[str, int] | None) -> str:
    return "none (not judged)" if not counts else ", ".join(f"{n} {pool}" for pool, n in counts.items())


def write_report(document: dict[str, Any], out: Path) -> Path:
    from gateway.bench.report import plot_profile_changes

    params, changing, references = document["params"], document["changing"], document["references"]
    plots = plot_profile_changes(document, out)
    ht, window = references[HT_SETUP]["window"], changing["window"]
    lines = [
        "# Changing a GPU's profile under changing load (emulated)",
        "",
        f"Reproduce: `{document['notes']['command']}` (run `{document['notes'][RUN_ID]}`)",
        "",
        report.units_note(document["time_scale"]),
        "Every fleet has two workers (two GPUs' worth) behind its own gateway and fresh emulator processes.",
        "",
        "| fleet | workers | load |",
        "|---|---|---|",
        f"| {HT_SETUP} | {references[HT_SETUP]['setup']} (static) | sustained c{params['concurrency']} |",
        f"| {ADAPTIVE} | {references[ADAPTIVE]['setup']} (static) | c{', c'.join(map(str, params['levels']))} |",
        f"| {CHANGING} | {changing['setup']} | sustained c{params['concurrency']} until 2 high-throughput, "
        f"then c{params['low_concurrency']} until a low-latency worker is back, then "
        f"c{', c'.join(map(str, params['levels']))} |",
        "",
        "## Targets",
        "",
        *_targets_lines(document),
        "",
        "Bounds: after sustained load the changed fleet delivers at least "
        "97% of the static two high-throughput fleet's audio-s/s over the same window length; after the load falls "
        "a low-latency worker is back and each level's TTFP p50 is within 10% of the static `adaptive` fleet's; no "
        "request fails, during the changes or anywhere else in the run.",
        "",
        "## Changes",
        "",
        "| from | to | worker | new worker | GPU | started (s) | finished (s) | took (s) | result |",
        "|---|---|---|---|---|---:|---:|---:|---|",
        *[f"| {c['from_pool']} | {c['to_pool']} | {c['worker']} | {c['new_worker'] or '–'} | {c['gpu']} | "
          f"{whole(c['started_s'])} | {whole(c['finished_s'])} | {whole(c['took_s'])} | {c['result']} |"
          for c in changing["changes"]],  # fmt: skip
        "",
        f"Two high-throughput workers routable at {whole(changing['to_ht']['reached_s'])} s "
        f"(timeout {params['change_timeout_s']:g} s); the load fell at {whole(changing['back']['load_fell_at_s'])} s; "
        f"a low-latency worker routable again at {whole(changing['back']['reached_s'])} s. Times from the start of "
        "the changing fleet's load; a change takes the drain, the target profile's modelled start-up and its warm-up.",
        "",
        "## Sustained load",
        "",
        f"c{params['concurrency']}, closed loop; audio delivered (chunks as they arrived) over a "
        f"{params['window_s']:g} s window, {params['settle_s']:g} s after the fleet was in place.",
        "",
        "| fleet | window starts (s) | audio-s/s |",
        "|---|---:|---:|",
        f"| {HT_SETUP} | {whole(ht['start_s'])} | {ht['audio_s_per_s']:.1f} |",
        f"| {CHANGING} | {whole(window['start_s'])}{'' if window['after_change'] else ' (never 2 high-throughput)'} | "
        f"{window['audio_s_per_s']:.1f} |",
        "",
        f"Routable at the end of the window: {_pools(changing['to_ht']['routable'])}; the planner's desired mix "
        f"then: {_pools(changing['to_ht'].get('planner_desired'))}.",
        "",
        "## Low load after the change back",
        "",
        f"Closed loop; requests per level {params['requests']}; no `x-sla-class` header (class `balanced`).",
        "",
        "| level | adaptive TTFP p50 / p99 (ms) | changing TTFP p50 / p99 (ms) | adaptive RTF mean | changing RTF mean "
        "| adaptive served by low-latency | changing served by low-latency |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *_level_rows(references[ADAPTIVE]["sweep"], changing["sweep"]),
        "",
        "Routing decisions during these levels (pool: reason, from `GET /admin/fleet`): "
        + (", ".join(f"{k} {v}" for k, v in changing.get("sweep_decisions", {}).items()) or "none recorded") + ".",
        "",
        "## Requests",
        "",
        "| fleet | sent | failed |",
        "|---|---:|---:|",
        *[f"| {name} | {part['requests']['sent']} | {part['requests']['failed']} |"
          for name, part in (*references.items(), (CHANGING, changing))],  # fmt: skip
        f"| {CHANGING}, in flight during a change | {changing['requests']['during_changes']['sent']} | "
        f"{changing['requests']['during_changes']['failed']} |",
        f"| whole run | | {failed_requests(document)} |",
        "",
        *[f"![{p.stem}]({p.name})" for p in plots],
        "",
        "## Configuration of the changing fleet",
        "",
        f"`supervisor.profile_changes`: hold {params['hold_s']:g} s, interval {params['change_interval_s']:g} s, "
        f"drain grace {params['drain_grace_s']:g} s, no pool minimum (all in modelled seconds; the gateway is "
        "given them scaled to wall time).",
        "",
        _mix_note(params),
        "",
        f"Machine: {document['machine']}; load generator, gateway and both emulated workers share it.",
        "",
    ]
    path = out / "README.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _mix_note(params: dict[str, Any]) -> str:
    planner = (f"`planner`: smoothing {params['smoothing_s']:g} s, interval {params['planner_interval_s']:g} s, "
               f"target utilisation {params['target_utilisation']:g}, low-latency 0..1 and high-throughput 0..2 "
               "workers, the default objectives (RTF and TTFP scaled to wall time, as the curves it reads are "
               "learned from wall-clock streams).")  # fmt: skip
    if params.get("mix") == "planner":
        return "Who decides: the gateway's own planner. " + planner
    return ("Who decides: the benchmark holds the mix its load calls for (`higgs-gateway bench held-mix`: "
            "the gateway with its desired mix read from a file): 0 low-latency + 2 high-throughput from the start "
            "of the sustained load, 1 + 1 from when it falls. So the change itself is measured, not the "
            "planner's judgement (`--mix planner` for that). The planner still runs; the plot shows the mix held. "
            + planner)  # fmt: skip


def _level_rows(reference: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    theirs = {p["concurrency"]: p for p in reference["phases"]}
    rows = []
    for phase in mine["phases"]:
        other = theirs.get(phase["concurrency"])
        rows.append(f"| c{phase['concurrency']} | {_ttfp(other)} | {_ttfp(phase)} | {_rtf(other)} | {_rtf(phase)} "
                    f"| {_ll_share(other)} | {_ll_share(phase)} |")  # fmt: skip
    return rows


def _ttfp(phase: dict[str, Any] | None) -> str:
    if phase is None or phase["ttfp_s"]["median"] is None:
        return "–"
    return f"{phase['ttfp_s']['median'] * 1000:.0f} / {phase['ttfp_s']['p99'] * 1000:.0f}"


def _ll_share(phase: dict[str, Any] | None) -> str:
    """Share of the level's requests the gateway sent to the low-latency pool (its response header)."""
    if phase is None or not phase["ok"]:
        return "–"
    return f"{phase['pools'].get(LL, 0) / phase['ok']:.0%}"


def _rtf(phase: dict[str, Any] | None) -> str:
    return "–" if phase is None or phase["rtf"]["mean"] is None else f"{phase['rtf']['mean']:.3f}"


# ---- the gateway holding a mix (bench held-mix) ---------------------------------------------
class FileMix:
    """``DesiredMix`` from a JSON file, read at each look (every ``profile_changes.interval_s``)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def mix_for(self, running: Mapping[str, int]) -> Mapping[str, int] | None:
        try:
            mix = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(mix, dict) or not all(isinstance(n, int) for n in mix.values()):
            return None
        return mix


def write_mix(path: Path, mix: Mapping[str, int]) -> None:
    """Replace the file in one step, so the gateway never reads half of it."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(dict(mix)))
    scratch.replace(path)


def add_held_mix_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "held-mix", help="serve with the worker mix read from a file (profile-changes --mix load)",
        description="`higgs-gateway serve --config FILE`, with the supervisor's profile changes following the mix "
        'in MIX.json ({"low_latency": 1, "high_throughput": 1}) instead of the planner\'s.', formatter_class=HelpFormatter,
    )  # fmt: skip
    parser.add_argument("--config", required=True)
    parser.add_argument("--mix", type=Path, required=True)
    parser.set_defaults(func=run_held_mix)


def run_held_mix(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    return serve.run(config, FileMix(args.mix))


# ---- the targets ----------------------------------------------------------------------------
def _levels(sweep: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {} if sweep is None else {phase["concurrency"]: phase for phase in sweep["phases"]}


def evaluate(document: dict[str, Any]) -> list[Target]:
    references, changing = document["references"], document["changing"]
    high = f"c{document.get('params', {}).get('concurrency', 64)}"
    targets: list[Target] = []
    ht_count = changing["to_ht"]["routable"].get(HT, 0)
    targets.append(Target(f"sustained {high}: high-throughput workers", ht_count, 2, ">=", 2, ht_count >= 2))
    mine = changing["window"]["audio_s_per_s"]
    theirs = references["ht+ht"]["window"]["audio_s_per_s"]
    bound = theirs * HT_SHARE
    targets.append(Target(f"{high} audio-s/s after the change vs ht+ht", mine, theirs, f">= {HT_SHARE:.0%} of", bound,
                          mine >= bound))  # fmt: skip
    ll_count = changing["back"]["routable"].get(LL, 0)
    targets.append(Target("low load: low-latency workers back", ll_count, 1, ">=", 1, ll_count >= 1))
    adaptive = _levels(references["adaptive"]["sweep"])
    for level, phase in sorted(_levels(changing.get("sweep")).items()):
        reference = adaptive.get(level)
        if reference is None or reference["ttfp_s"]["median"] is None:
            continue
        median = phase["ttfp_s"]["median"]
        value = float("inf") if median is None else median * 1000
        theirs = reference["ttfp_s"]["median"] * 1000
        bound = theirs * TTFP_P50_SLACK
        targets.append(Target(f"c{level} TTFP p50 (ms) after the change back vs adaptive", value, theirs,
                              f"<= {TTFP_P50_SLACK:.0%} of", bound, value <= bound))  # fmt: skip
    during = changing["requests"]["during_changes"]["failed"]
    targets.append(Target("failed requests during the changes", during, 0, "=", 0, during == 0))
    total = failed_requests(document)
    targets.append(Target("failed requests, whole run (every fleet)", total, 0, "=", 0, total == 0))
    return targets


def failed_requests(document: dict[str, Any]) -> int:
    parts = [*document["references"].values(), document["changing"]]
    return sum(part["requests"]["failed"] for part in parts)


def targets_table(targets: Sequence[Target]) -> list[str]:
    met = sum(bool(t.passed) for t in targets)
    lines = [
        f"{met} of {len(targets)} met; the references were measured in the same run.",
        "",
        "| target | changing fleet | reference | must be | bound | met |",
        "|---|---:|---:|---|---:|:---:|",
    ]
    for t in targets:
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | "
                     f"{'yes' if t.passed else '**no**'} |")  # fmt: skip
    return lines


def _fmt(value: float) -> str:
    if value == float("inf"):
        return "none"
    if float(value).is_integer() and abs(value) < 1000:
        return str(int(value))
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
