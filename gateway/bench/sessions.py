"""``higgs-gateway bench sessions``: concurrent voice-agent sessions, heard in real time.

Each session streams multi-sentence replies at an LLM's pace (``--tokens-per-second``,
about four characters a token), flushes each with ``input.done`` and plays the audio back
through a simulated real-time player. Per number of concurrent sessions it records time to
first audio (from the moment the first sentence's text was complete), every gap a listener
sits through, and whether the level was served (no gap at p99, first audio p99 within 1 s).
Then, on gateway setups, sessions abandoned every way (``session_abandon``) and, alone on
the fleet, one barge-in: ``input.cancel`` to the last audio byte and to every worker's
``/load`` back at 0.

Fleets, all in one run (fresh emulated workers each, like ``bench compare``): ``adaptive``
(1 low-latency + 1 high-throughput), ``ll+ll``, ``ht+ht`` through the gateway, and
``direct``: one low-latency worker's own endpoint. Sessions are configured as a voice agent
would: ``pcm``, ``stream_audio: true``, ``split_granularity: sentence``.

Figures, in modelled seconds, per utterance: time to first audio (first audio byte minus
the moment the first sentence's text was complete) and, through the simulated real-time
player, every silence it suffers, told apart by where it ends:

- a *gap between sentences*: before a later sentence's first byte (the pipelining and the
  routing of later sentences decide it);
- a *stall*: before any chunk of a sentence after its first two (the fleet falling behind
  real time);
- the *first-frame hole*: before a sentence's second chunk. The worker streams one codec
  frame (40 ms of audio) first, then 25-frame (1 s) chunks, so a player that starts at the
  first byte hears 40 ms and then waits for the first full chunk: about 210 ms (modelled)
  on an idle worker, the worker's own endpoint included. It is the worker's chunk schedule,
  reported but not counted as a gap.

Gaps are the first two kinds. A sentence's silence is the sum of the gaps that end with its
chunks; the level has "no gap at p99" when the 99th percentile of sentence silences is
within the tolerance (a player's jitter buffer), and a level is *served* when also every
utterance succeeded and the first audio's p99 is within the bound.

The targets of the committed report are judged on one run's documents, as the routing
targets are: a comparison counts only when every setup it reads was measured in the same
run (``notes.run_id``), otherwise it is "not comparable"; a target this benchmark does not
measure is listed as such rather than dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import WebSocketException

from gateway.bench import compare, session_abandon
from gateway.bench.arguments import add_quiet_arguments, int_list, load_average, wait_for_quiet
from gateway.bench.client import speech_url
from gateway.bench.fleet import LL_PROFILE, Fleet
from gateway.bench.stats import Summary, percentile
from gateway.bench.targets import ADAPTIVE, HT, LL, RUN_ID, Target, new_run_id, same_run
from gateway.bench.voice_client import DEFAULT_TOKENS_PER_SECOND, REPLIES, Player, SessionOptions, Utterance, barge_in, open_session, replies, speak
from gateway.config import DEFAULT_MODEL
from gateway.help_format import HelpFormatter

SCHEMA = "higgs-gateway-bench-sessions/1"
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 24, 32, 40, 48)  # past every fleet's capacity on two workers
DEFAULT_GAP_TOLERANCE_S = 0.020  # one audio-device buffer: jitter no listener hears
FIRST_AUDIO_P99_BOUND_S = 1.0  # the capacity target's bound
DIRECT = "direct"
SETUP_NAMES = (ADAPTIVE, LL, HT, DIRECT)
FEW_SESSIONS = (1, 2, 3, 4)
DIRECT_FIRST_AUDIO_SLACK_WALL_S = 0.010
BARGE_IN_LAST_BYTE_S = 0.100
SUMMARIES = {DIRECT: "one low-latency worker's own endpoint, no gateway"}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("sessions", help="concurrent voice-agent sessions played in real time, one report",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/sessions"))
    parser.add_argument("--setups", default=",".join(SETUP_NAMES), help="comma-separated subset of " + ", ".join(SETUP_NAMES))
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrent sessions to sweep")
    parser.add_argument("--utterances", type=int, default=3, help="replies per session and level")
    parser.add_argument("--sentences", type=int, default=4, help="sentences per reply (1-4)")
    parser.add_argument("--tokens-per-second", type=float, default=DEFAULT_TOKENS_PER_SECOND,
                        help="the LLM's pace (a token is about 4 characters)")  # fmt: skip
    parser.add_argument("--pause", type=float, default=1.0, help="modelled seconds between replies (the user speaking)")
    parser.add_argument("--gap-tolerance-ms", type=float, default=DEFAULT_GAP_TOLERANCE_S * 1000,
                        help="silences up to this long (modelled) are a player's jitter, not a gap")  # fmt: skip
    parser.add_argument("--barge-in-after", type=float, default=1.0,
                        help="modelled seconds of audio before the listener interrupts (0 = no barge-in)")  # fmt: skip
    parser.add_argument("--abandon", type=int, default=session_abandon.DEFAULT_SESSIONS,
                        help="sessions opened and abandoned every way on each gateway setup, then checked for leaks (0 = none)")
    parser.add_argument("--abandon-concurrency", type=int, default=session_abandon.DEFAULT_CONCURRENCY,
                        help="most abandoned sessions open at once")  # fmt: skip
    parser.add_argument("--http-probes", type=int, default=6, help="HTTP requests for the first sentence's TTFP")
    parser.add_argument("--time-scale", type=float, default=0.25, help="emulator speed-up; results in modelled units")
    parser.add_argument("--timeout", type=float, default=120.0, help="per utterance, wall seconds")
    parser.add_argument("--seed", type=int, default=0)
    add_quiet_arguments(parser)
    parser.add_argument("--report-only", action="store_true", help="re-render README.md from the JSON files in --out")
    parser.set_defaults(func=run)


def chosen(spec: str) -> list[str]:
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = set(names) - set(SETUP_NAMES)
    if unknown:
        raise SystemExit(f"unknown setups: {', '.join(sorted(unknown))}")
    return [name for name in SETUP_NAMES if name in names]


def run(args: argparse.Namespace) -> int:
    if args.time_scale <= 0 or args.tokens_per_second <= 0 or not 1 <= args.sentences <= 4:
        raise SystemExit("--time-scale and --tokens-per-second must be positive, --sentences 1 to 4")
    names = chosen(args.setups)
    levels = int_list(args.levels)
    documents: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    if args.report_only:
        documents = [_load(path) for name in names for path in sorted(args.out.glob(f"{_stem(name)}.json"))]
    else:
        run_id = new_run_id()
        with tempfile.TemporaryDirectory(prefix="higgs-bench-sessions-") as scratch:
            for name in names:
                try:
                    document = _measure(name, Path(scratch), args, levels, run_id)
                except (RuntimeError, TimeoutError, OSError) as exc:  # one broken setup must not lose the others
                    failures[name] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                    print(f"{name}: failed: {failures[name]}", file=sys.stderr)
                    continue
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{_stem(name)}.json").write_text(json.dumps(document, indent=2) + "\n")
                documents.append(document)
    path = write_report(documents, args, failures)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _stem(name: str) -> str:
    return f"{name}-sessions"


def _load(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} result")
    return document


def _measure(name: str, scratch: Path, args: argparse.Namespace, levels: list[int], run_id: str) -> dict[str, Any]:
    wait_for_quiet(args.quiet_load, args.quiet_wait)
    with Fleet(scratch / name.replace("+", "_")) as fleet:
        if name == DIRECT:
            worker = fleet.emulator("worker1", LL_PROFILE, args.time_scale, extra=["--warm"])
            url, workers, summary = worker.url, [worker.url], SUMMARIES[DIRECT]
        else:
            setup = next(s for s in compare.SETUPS if s.name == name)
            timeouts = session_abandon.gateway_timeouts(args.pause * args.time_scale) if args.abandon > 0 else None
            url = compare.start_setup(fleet, setup, args.time_scale, sessions=timeouts)
            workers = [s.url for s in fleet.services if s.name.startswith("worker")]
            summary = setup.summary
        return asyncio.run(_measure_async(name, summary, url, workers, args, levels, run_id))


def make_options(url: str, args: argparse.Namespace) -> SessionOptions:
    return SessionOptions(url, args.tokens_per_second, args.time_scale, timeout_s=args.timeout)


async def _measure_async(name: str, summary: str, url: str, workers: list[str], args: argparse.Namespace,
                         levels: list[int], run_id: str) -> dict[str, Any]:  # fmt: skip
    options = make_options(url, args)
    gateway = name != DIRECT
    tolerance = args.gap_tolerance_ms / 1000
    await _one_level(options, 1, 1, args, gateway, seed=-1)  # connections and caches settle, unmeasured
    phases = []
    for level in levels:
        started = time.perf_counter()
        utterances, failures = await _one_level(options, level, args.utterances, args, gateway, args.seed + level)
        wall = time.perf_counter() - started
        phases.append(summarize_level(level, utterances, failures, args.time_scale, wall, tolerance, load_average()))
        print(f"{name}: {level} sessions: {'served' if phases[-1]['served'] else 'not served'}", file=sys.stderr)
    document: dict[str, Any] = {
        "schema": SCHEMA, "label": name, "mode": "sessions", "url": url, "time_scale": args.time_scale,
        "machine": f"{os.cpu_count()}-core {platform.machine()}",
        "params": {"levels": levels, "utterances": args.utterances, "sentences": args.sentences,
                   "tokens_per_second": args.tokens_per_second, "chars_per_token": 4, "pause_s": args.pause,
                   "gap_tolerance_s": tolerance, "seed": args.seed},
        "notes": {"setup": summary, "command": compare._command(), RUN_ID: run_id,
                  "emulator_timing": compare.timing_parameters()},
        "phases": phases,
        "capacity": capacity(phases),
        "http_first_sentence_ttfp_s": None,
        "http_first_sentence_ttfp_by_sessions": {},
        "barge_in": None,
    }  # fmt: skip
    if args.http_probes > 0:
        # The same first sentences as one-shot HTTP requests, from as many clients at once as
        # there were sessions: the reference a session's first audio is held to at that load.
        for level in [1, *(n for n in levels if 1 < n <= max(FEW_SESSIONS))]:
            ttfp = await http_first_sentence_ttfp(url, args, gateway, clients=level)
            document["http_first_sentence_ttfp_by_sessions"][str(level)] = ttfp
        document["http_first_sentence_ttfp_s"] = document["http_first_sentence_ttfp_by_sessions"]["1"]
    if gateway and args.abandon > 0:
        timeouts = session_abandon.gateway_timeouts(args.pause * args.time_scale)
        try:
            document["abandon"] = await session_abandon.measure(options, workers, args.abandon, args.abandon_concurrency, timeouts)
        except (OSError, TimeoutError, WebSocketException, httpx.HTTPError) as exc:  # a missed target, not a lost setup
            document["abandon_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if gateway and args.barge_in_after > 0:
        try:
            result = await barge_in(options, REPLIES[0], workers, args.barge_in_after)
        except (OSError, TimeoutError, WebSocketException) as exc:  # a missed target, not a lost setup
            document["barge_in_error"] = f"{type(exc).__name__}: {exc}"[:300]
            return document
        freed = None if result.slot_freed_s is None else result.slot_freed_s / args.time_scale
        document["barge_in"] = {"last_byte_s": result.last_byte_s / args.time_scale, "slot_freed_s": freed,
                                "bytes_after_cancel": result.bytes_after_cancel,
                                "total_bytes_reported": result.total_bytes_reported}  # fmt: skip
    return document


async def _one_level(options: SessionOptions, sessions: int, utterances: int, args: argparse.Namespace,
                     gateway: bool, seed: int) -> tuple[list[Utterance], int]:  # fmt: skip
    """``sessions`` sessions at once, each starting within a modelled second (seeded) and
    speaking ``utterances`` replies; returns every utterance and the number of failed sessions."""
    rng = random.Random(seed)
    offsets = [rng.uniform(0, 1.0) * args.time_scale for _ in range(sessions)]

    async def one(index: int) -> list[Utterance]:
        await asyncio.sleep(offsets[index])
        ws = await open_session(options, gateway)
        heard = []
        try:
            for number, reply in enumerate(replies(utterances, offset=index)):
                if number:
                    await asyncio.sleep(args.pause * args.time_scale)
                trimmed = dataclasses.replace(reply, sentences=reply.sentences[: args.sentences])
                heard.append(await speak(ws, trimmed, options))
        finally:
            await ws.close()
        return heard

    results = await asyncio.gather(*(one(i) for i in range(sessions)), return_exceptions=True)
    heard = [u for r in results if not isinstance(r, BaseException) for u in r]
    failed = sum(isinstance(r, BaseException) for r in results)
    for r in results:
        if isinstance(r, BaseException):
            print(f"session failed: {type(r).__name__}: {r}", file=sys.stderr)
    return heard, failed


async def http_first_sentence_ttfp(url: str, args: argparse.Namespace, gateway: bool, clients: int = 1) -> float | None:
    """Median TTFP (modelled) of the replies' first sentences as one-shot streamed HTTP
    requests, ``clients`` at a time, each sending ``--http-probes`` requests one after another."""
    values: list[float] = []

    async def probe(client: httpx.AsyncClient, index: int) -> None:
        body = {"model": DEFAULT_MODEL, "input": REPLIES[index % len(REPLIES)].sentences[0],
                "response_format": "pcm", "stream_format": "audio"}  # fmt: skip
        if gateway:  # the OpenAI API requires a voice; a worker knows no voice named "default"
            body["voice"] = "default"
        started = time.perf_counter()
        async with client.stream("POST", speech_url(url), json=body) as response:
            if response.status_code != 200:
                return
            first: float | None = None
            async for chunk in response.aiter_bytes():  # read to the end: the slot frees there
                if chunk and first is None:
                    first = (time.perf_counter() - started) / args.time_scale
            if first is not None:
                values.append(first)

    async def one_client(client: httpx.AsyncClient, number: int) -> None:
        for index in range(args.http_probes):
            await probe(client, number + index)

    async with httpx.AsyncClient(timeout=args.timeout) as client:
        await asyncio.gather(*(one_client(client, number) for number in range(clients)))
    return percentile(values, 50) if values else None


def write_report(documents: list[dict[str, Any]], args: argparse.Namespace, failures: dict[str, str]) -> Path:
    from gateway.bench.report import plot_sessions

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_sessions(documents, out) if documents else []
    recorded = [d["notes"]["command"] for d in documents if d.get("notes", {}).get("command")]
    command = recorded[0] if recorded else compare._command()
    params = documents[0]["params"] if documents else {
        "sentences": args.sentences, "tokens_per_second": args.tokens_per_second,
        "gap_tolerance_s": args.gap_tolerance_ms / 1000}  # fmt: skip
    lines = [
        "# Voice sessions (emulated)",
        "",
        f"Reproduce: `{command}`",
        "",
        f"Emulated workers at time scale {documents[0]['time_scale'] if documents else args.time_scale:g}; every "
        "time is converted to modelled (H200-equivalent) seconds.",
        f"Each session streams replies of up to {params.get('sentences', '?')} sentences at "
        f"{params.get('tokens_per_second', '?'):g} tokens/s (4 characters a token), flushes with `input.done`, "
        "and plays the audio through a simulated real-time player (24 kHz, from the first byte). "
        f"A gap is a silence longer than {params.get('gap_tolerance_s', 0) * 1000:g} ms before the reply's last "
        "byte, either before a later sentence's first audio or a stall within a sentence. Not counted: the "
        "*first-frame hole*, the wait after a sentence's first chunk, which the worker makes one codec frame "
        "(40 ms of audio) long before its 1 s chunks; every fleet has it, the worker's own endpoint too, so it "
        "is shown beside the gaps. A level is served when every utterance succeeded, sentence silences at p99 "
        "are within the tolerance, and first audio p99 is within 1 s. Time to first audio counts from the "
        "moment the first sentence's text was complete. Sessions: `pcm`, `stream_audio: true`, "
        "`split_granularity: sentence`.",
        "",
        "| setup | fleet |",
        "|---|---|",
        *[f"| {d['label']} | {d['notes']['setup']} |" for d in documents],
        "",
        *[f"**{name} failed to run:** `{reason}`\n" for name, reason in failures.items()],
        "## Summary",
        "",
        "| setup | capacity (sessions) | 1 session first audio p50 (ms) | 1 session largest gap (ms) | "
        "HTTP first-sentence TTFP p50 (ms) | barge-in: last byte / slot freed (ms) |",
        "|---|---:|---:|---:|---:|---:|",
        *[_summary_row(d) for d in documents],
        "",
        *targets_table(documents),
        *session_abandon.report_lines(documents),
        "## By number of sessions",
        "",
        "| setup | sessions | utterances | errors | first audio p50 / p99 (ms) | sentence silence p99 / max (ms) | "
        "gaps | largest gap (ms) | first-frame hole p50 / max (ms) | pools | served | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|:---:|---:|",
        *[_level_row(d, p) for d in documents for p in d["phases"]],
        "",
        *[f"![{p.stem}]({p.name})" for p in plots],
        "",
        f"Machine: {documents[0]['machine'] if documents else 'unknown'}; load generator, gateway and the "
        "emulated workers share it.",
        "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def _summary_row(document: dict[str, Any]) -> str:
    one = next((p for p in document["phases"] if p["sessions"] == 1), None)
    barge = document.get("barge_in")
    barge_text = "–" if barge is None else f"{_ms(barge['last_byte_s'])} / {_ms(barge['slot_freed_s'])}"
    return (f"| {document['label']} | {document['capacity']} | "
            f"{_ms(one['first_audio_s']['median']) if one else '–'} | {_ms(one['largest_gap_s']) if one else '–'} | "
            f"{_ms(document.get('http_first_sentence_ttfp_s'))} | {barge_text} |")  # fmt: skip


def _holes(phase: dict[str, Any]) -> str:
    holes = phase.get("first_frame_hole_s")  # absent from documents written before it was kept
    return "–" if not holes or not holes["count"] else f"{_ms(holes['median'])} / {_ms(holes['max'])}"


def _level_row(document: dict[str, Any], phase: dict[str, Any]) -> str:
    ttfa, silence = phase["first_audio_s"], phase["sentence_silence_s"]
    pools = " ".join(f"{k}:{v}" for k, v in sorted(phase["pools"].items())) or "–"
    load = "–" if phase.get("loadavg_1m") is None else f"{phase['loadavg_1m']:.1f}"
    return (f"| {document['label']} | {phase['sessions']} | {phase['utterances']} | {phase['errors']} | "
            f"{_ms(ttfa['median'])} / {_ms(ttfa['p99'])} | {_ms(silence['p99'])} / {_ms(silence['max'])} | "
            f"{phase['gaps_over_tolerance']} | {_ms(phase['largest_gap_s'])} | {_holes(phase)} | {pools} | "
            f"{'yes' if phase['served'] else 'no'} | {load} |")  # fmt: skip


# ---- one level's figures --------------------------------------------------------------------
def _summary(values: Sequence[float]) -> dict[str, Any]:
    return dataclasses.asdict(Summary.of(values))


def summarize_level(sessions: int, utterances: Sequence[Utterance], failures: int, time_scale: float,
                    wall_s: float, tolerance_s: float = DEFAULT_GAP_TOLERANCE_S,
                    loadavg: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One sweep level's phase document."""
    first_audio: list[float] = []
    gaps: list[float] = []
    holes: list[float] = []
    silences: list[float] = []
    audio_s = 0.0
    errors = failures
    pools: Counter[str] = Counter()
    for utterance in utterances:
        errors += len(utterance.errors)
        pools.update(utterance.pools)
        if not utterance.chunks:
            continue
        first_audio.append((utterance.chunks[0][0] - utterance.first_sentence_complete) / time_scale)
        player = Player()
        per_sentence: dict[int, float] = {}
        chunks_seen: Counter[int] = Counter()
        for at, size, sentence in utterance.chunks:
            silence = player.add(at / time_scale, size)
            ordinal = chunks_seen[sentence]
            chunks_seen[sentence] += 1
            if ordinal == 1:  # the worker's first-frame hole, not a gap
                if silence > 0:
                    holes.append(silence)
                silence = 0.0
            elif silence > 0:
                gaps.append(silence)
            per_sentence[sentence] = per_sentence.get(sentence, 0.0) + silence
        silences += list(per_sentence.values())
        audio_s += player.audio_s
    silence = _summary(silences)
    ttfa = _summary(first_audio)
    heard = sorted(gaps, reverse=True)
    return {
        "sessions": sessions,
        "utterances": len(utterances),
        "utterances_with_audio": len(first_audio),
        "errors": errors,
        "pools": dict(pools),
        "first_audio_s": ttfa,
        "sentence_silence_s": silence,
        "gaps_over_tolerance": sum(gap > tolerance_s for gap in gaps),
        "gaps_s": [round(gap, 5) for gap in heard],  # every gap, largest first
        "largest_gap_s": heard[0] if heard else 0.0,
        "first_frame_hole_s": _summary(holes),
        "audio_s": audio_s,
        "wall_s": wall_s,
        "loadavg_1m": loadavg,
        "served": served(errors, len(first_audio), len(utterances), silence["p99"], ttfa["p99"], tolerance_s),
    }


def served(errors: int, with_audio: int, utterances: int, silence_p99: float | None, first_audio_p99: float | None,
           tolerance_s: float) -> bool:  # fmt: skip
    return (
        errors == 0
        and utterances > 0
        and with_audio == utterances
        and silence_p99 is not None
        and silence_p99 <= tolerance_s
        and first_audio_p99 is not None
        and first_audio_p99 <= FIRST_AUDIO_P99_BOUND_S
    )


def capacity(phases: Sequence[dict[str, Any]]) -> int:
    """The most sessions served with no gap at p99 (0 if no level was)."""
    return max((phase["sessions"] for phase in phases if phase["served"]), default=0)


# ---- the targets ----------------------------------------------------------------------------
def _document(documents: Sequence[dict[str, Any]], label: str) -> dict[str, Any] | None:
    return next((d for d in documents if d["label"] == label and d["mode"] == "sessions"), None)


def _levels(document: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {} if document is None else {phase["sessions"]: phase for phase in document["phases"]}


def evaluate(documents: Sequence[dict[str, Any]]) -> tuple[list[Target], list[str]]:
    """The targets, and the ones not measured by this benchmark (by name)."""
    found = [d for d in (_document(documents, name) for name in SETUP_NAMES) if d is not None]
    abandoned = session_abandon.evaluate(documents)
    targets = _evaluate(documents) + abandoned
    if not same_run(found):
        targets = [replace(t, passed=None) for t in targets]
    return targets, [] if abandoned else ["200 sessions opened and abandoned in every way: no leak, memory back"]


def _http_ttfp(document: dict[str, Any] | None, sessions: int) -> float | None:
    """The HTTP TTFP of the first sentences from as many clients as sessions; documents
    written before that was measured have the one-client figure only."""
    if document is None:
        return None
    by_sessions = document.get("http_first_sentence_ttfp_by_sessions") or {}
    if by_sessions:
        value: float | None = by_sessions.get(str(sessions))
        return value
    return document.get("http_first_sentence_ttfp_s") if sessions == 1 else None


def _evaluate(documents: Sequence[dict[str, Any]]) -> list[Target]:
    adaptive_doc, ll_doc = _document(documents, ADAPTIVE), _document(documents, LL)
    ht_doc, direct_doc = _document(documents, HT), _document(documents, DIRECT)
    if adaptive_doc is None:
        return []
    adaptive = _levels(adaptive_doc)
    targets: list[Target] = []
    for level in FEW_SESSIONS:
        phase = adaptive.get(level)
        if phase is None:
            continue
        sessions = f"{level} session{'s' if level > 1 else ''}"
        p50 = phase["first_audio_s"]["median"]
        http_ttfp = _http_ttfp(ll_doc, level)
        if http_ttfp is not None and p50 is not None:
            bound = http_ttfp * 1.10
            targets.append(Target(f"{sessions}: first audio p50 vs HTTP TTFP on ll+ll ({level} at once)", p50,
                                  http_ttfp, "<= 110% of", bound, p50 <= bound))  # fmt: skip
        gaps = phase["gaps_over_tolerance"]
        targets.append(Target(f"{sessions}: gaps", gaps, 0, "=", 0, gaps == 0 and phase["errors"] == 0))
    direct = _levels(direct_doc).get(1)
    if 1 in adaptive and direct is not None:
        mine, theirs = adaptive[1]["largest_gap_s"], direct["largest_gap_s"]
        # Silences within the tolerance are a player's jitter, not gaps: equal up to it.
        bound = theirs + adaptive_doc.get("params", {}).get("gap_tolerance_s", DEFAULT_GAP_TOLERANCE_S)
        targets.append(Target("1 session: largest gap vs direct", mine, theirs, "<= (+ tolerance)", bound,
                              mine <= bound))  # fmt: skip
        a, b = adaptive[1]["first_audio_s"]["median"], direct["first_audio_s"]["median"]
        if a is not None and b is not None:
            bound = b + DIRECT_FIRST_AUDIO_SLACK_WALL_S / adaptive_doc["time_scale"]
            targets.append(Target("1 session: first audio p50 vs direct", a, b, "<= + 10 ms wall", bound, a <= bound))
    mine_cap = capacity(adaptive_doc["phases"])
    for doc, share, name in ((ll_doc, 1.5, LL), (ht_doc, 0.9, HT)):
        if doc is not None:
            theirs_cap = capacity(doc["phases"])
            bound = theirs_cap * share
            # Capacity 0 on both sides is no evidence of anything: it is missed, not met.
            ok = mine_cap >= bound and mine_cap > 0
            targets.append(Target(f"capacity (sessions) vs {name}", mine_cap, theirs_cap, f">= {share:.0%} of", bound, ok))
    barge = adaptive_doc.get("barge_in")
    if adaptive_doc.get("barge_in_error"):  # it did not complete: both rows missed
        never = float("nan")
        targets.append(Target("barge-in: cancel to last audio byte", never, BARGE_IN_LAST_BYTE_S, "<=",
                              BARGE_IN_LAST_BYTE_S, False))  # fmt: skip
        targets.append(Target("barge-in: cancel to every worker slot freed", never, 0, "freed", 0, False))
    elif barge is not None:
        last = barge["last_byte_s"]
        targets.append(Target("barge-in: cancel to last audio byte", last, BARGE_IN_LAST_BYTE_S, "<=",
                              BARGE_IN_LAST_BYTE_S, last <= BARGE_IN_LAST_BYTE_S))  # fmt: skip
        freed = barge["slot_freed_s"]
        targets.append(Target("barge-in: cancel to every worker slot freed", float("nan") if freed is None else freed,
                              0, "freed", 0, freed is not None))  # fmt: skip
    return targets


def _fmt(value: float) -> str:
    if value != value:  # NaN: never happened
        return "never"
    return f"{value:.3f}" if abs(value) < 100 and value != int(value) else f"{value:g}"


def targets_table(documents: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines: every target with met / missed / not comparable."""
    targets, unmeasured = evaluate(documents)
    if not targets:
        return []
    if all(t.passed is not None for t in targets):
        summary = (f"{sum(bool(t.passed) for t in targets)} of {len(targets)} met; every setup measured in the "
                   "same run. Times in modelled seconds.")  # fmt: skip
    else:
        summary = ("**Not comparable**: the setups were measured in different runs (or carry no run id), so no "
                   "target is judged. Re-run them together.")  # fmt: skip
    lines = ["## Targets", "", summary, "", "| target | adaptive | reference | must be | bound | met |",
             "|---|---:|---:|---|---:|:---:|"]  # fmt: skip
    for t in targets:
        met = "not comparable" if t.passed is None else "yes" if t.passed else "**no**"
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | {met} |")
    lines += [f"| {name} | – | – | – | – | not measured by `bench sessions` |" for name in unmeasured]
    return [*lines, ""]
