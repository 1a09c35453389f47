"""``higgs-gateway bench integrations``: the Pipecat and LiveKit session TTSes against the bare session client.

One gateway over emulated workers (the ``adaptive`` fleet of ``bench sessions``: 1
low-latency + 1 high-throughput) and four clients, each holding one socket for the whole
run: ``session``, the sessions benchmark's own client (``voice_client``), whose first audio
is the benchmark's session figure, measured again here in the same run; ``pipecat``, a real
Pipecat pipeline with ``HiggsSessionTTSService`` and a sink at its end; ``livekit``,
``gateway.integrations.livekit.TTS`` read through LiveKit's ``SynthesizeStream``; and
``pipecat-tokens``, the Pipecat service with ``TextAggregationMode.TOKEN``, for comparison.

Each client speaks the same three-sentence replies, streamed at an LLM's pace
(``text_stream``), one reply at a time, the clients taking turns so the machine's load
falls on all of them alike; a client's next reply starts once its last one played out in
real time (the gateway's player model runs on the wall clock: sooner, at a time scale
below 1, the reply would wait for the look-ahead window). First audio counts, as in ``bench sessions``, from the moment
the first sentence's text was complete to the first audio at the client's output (the
sink at the end of Pipecat's pipeline; LiveKit's stream events). Then each framework is
interrupted ``--interrupt-after`` modelled seconds into a reply (Pipecat: an
``InterruptionFrame``; LiveKit: closing the stream, as ``AgentSession`` does) and speaks
the next reply at once: measured are when the interrupted reply's audio stopped at the
output (Pipecat: the interruption reached it and no more of the reply came), the time to
close the stream (LiveKit; it returns once
the gateway answered ``input.cancelled``), the next reply's first audio and the sockets
opened over the whole run (1: no reconnect).

Needs the ``pipecat`` and ``livekit`` extras.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gateway.bench import compare
from gateway.bench.fleet import Fleet
from gateway.bench.arguments import add_quiet_arguments, load_average, wait_for_quiet
from gateway.bench.stats import percentile
from gateway.bench.targets import RUN_ID, new_run_id
from gateway.bench.voice_client import (
    DEFAULT_TOKENS_PER_SECOND, Reply, SessionOptions, first_sentence_complete_s, open_session, replies, schedule, speak,
)
from gateway.help_format import HelpFormatter

SCHEMA = "higgs-gateway-bench-integrations/1"
CLIENTS = ("session", "pipecat", "livekit", "pipecat-tokens")
FRAMEWORKS = ("pipecat", "livekit")
SAMPLE_RATE = 24_000
FIRST_AUDIO_SHARE = 1.10  # a framework's first audio p50: within 10% of the session client's
INTERRUPT_STOP_S = 0.100  # modelled: the interrupted reply's audio stops within this
SEED = 42  # one voice for every client: the same audio for the same text


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("integrations", help="the Pipecat and LiveKit session TTSes vs the bare session client",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/integrations"))
    parser.add_argument("--replies", type=int, default=9, help="measured replies per client")
    parser.add_argument("--sentences", type=int, default=3, help="sentences per reply (1-4)")
    parser.add_argument("--tokens-per-second", type=float, default=DEFAULT_TOKENS_PER_SECOND,
                        help="the LLM's pace (a token is about 4 characters)")  # fmt: skip
    parser.add_argument("--pause", type=float, default=1.0, help="modelled seconds between replies")
    parser.add_argument("--interruptions", type=int, default=3, help="interrupted replies per framework")
    parser.add_argument("--interrupt-after", type=float, default=1.0,
                        help="modelled seconds after a reply's first audio that the listener interrupts")  # fmt: skip
    parser.add_argument("--time-scale", type=float, default=0.25, help="emulator speed-up; results in modelled units")
    parser.add_argument("--timeout", type=float, default=120.0, help="per reply, wall seconds")
    add_quiet_arguments(parser, before="before starting")
    parser.add_argument("--report-only", action="store_true", help="re-render README.md from the JSON in --out")
    parser.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Heard:
    """One reply as the client's output got it (wall seconds)."""

    first_audio_s: float | None  # from its first sentence's text being complete
    audio_s: float  # seconds of audio
    played_out_at: float  # perf_counter when a real-time player from its first audio is done with it


@dataclass(frozen=True, slots=True)
class Interrupted:
    """One interruption (wall seconds from it)."""

    heard_before_s: float  # audio of the reply heard before it
    audio_after_s: float  # until the reply's audio stopped at the output (see the report)
    close_s: float | None  # until the stream was closed (LiveKit: the gateway answered input.cancelled)
    next_reply: Heard  # the reply spoken right after, on the same socket


async def _paced(reply: Reply, options: SessionOptions, send: Callable[[str], Any]) -> float:
    """Send the reply's pieces at the LLM's pace; returns when its first sentence was complete
    (``perf_counter``), as ``voice_client`` counts it."""
    started = time.perf_counter()
    pieces = schedule(reply.text, options.tokens_per_second)
    for piece in pieces:
        delay = started + piece.at_s * options.time_scale - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(piece.text)
    return started + first_sentence_complete_s(reply, pieces) * options.time_scale


# ---- the bare session client: the benchmark's session figure -------------------------------------


class SessionClient:
    name = "session"

    def __init__(self, options: SessionOptions) -> None:
        self._options = options
        self._ws: Any = None

    async def open(self) -> None:
        self._ws = await open_session(replace(self._options), gateway=True)

    async def speak(self, reply: Reply) -> Heard:
        started = time.perf_counter()  # speak()'s times count from here, to within microseconds
        utterance = await speak(self._ws, reply, self._options)
        audio_s = sum(size for _, size, _ in utterance.chunks) / (2 * SAMPLE_RATE)
        if not utterance.chunks:
            return Heard(None, 0.0, time.perf_counter())
        first = utterance.chunks[0][0]
        return Heard(first - utterance.first_sentence_complete, audio_s, started + first + audio_s)

    @property
    def connects(self) -> int:
        return 1

    async def close(self) -> None:
        await self._ws.close()


# ---- Pipecat: a pipeline with the session service and a sink ---------------------------------------


class PipecatClient:
    def __init__(self, options: SessionOptions, tokens: bool = False) -> None:
        """``tokens``: Pipecat's ``TextAggregationMode.TOKEN`` (every token handed on as it
        comes) instead of its default sentence aggregation."""
        self._options = options
        self._tokens = tokens
        self.name = "pipecat-tokens" if tokens else "pipecat"

    async def open(self) -> None:
        from pipecat.frames.frames import Frame, InterruptionFrame, TTSAudioRawFrame, TTSStoppedFrame
        from pipecat.pipeline.pipeline import Pipeline
        from pipecat.pipeline.worker import PipelineWorker
        from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
        from pipecat.services.tts_service import TextAggregationMode
        from pipecat.workers.runner import WorkerRunner

        from gateway.integrations.pipecat import HiggsSessionTTSService

        class Output(FrameProcessor):
            """The pipeline's end: when each context's audio arrived, and which ended."""

            def __init__(self) -> None:
                super().__init__()
                self.audio: list[tuple[float, str, int]] = []  # (perf_counter, context, samples)
                self.stopped: set[str] = set()
                self.interrupted_at: float | None = None  # the last InterruptionFrame's arrival
                self.changed = asyncio.Event()

            async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
                await super().process_frame(frame, direction)
                if direction is FrameDirection.DOWNSTREAM:
                    if isinstance(frame, TTSAudioRawFrame) and frame.context_id:
                        self.audio.append((time.perf_counter(), frame.context_id, frame.num_frames))
                    elif isinstance(frame, TTSStoppedFrame) and frame.context_id:
                        self.stopped.add(frame.context_id)
                    elif isinstance(frame, InterruptionFrame):
                        self.interrupted_at = time.perf_counter()
                    self.changed.set()
                await self.push_frame(frame, direction)

        # Its end-of-audio timer past the run's timeout: a reply ends on session.done only.
        mode = TextAggregationMode.TOKEN if self._tokens else TextAggregationMode.SENTENCE
        self.tts = HiggsSessionTTSService(base_url=self._options.url, voice=self._options.voice,
                                          session_config={"seed": SEED}, stop_frame_timeout_s=self._options.timeout_s,
                                          text_aggregation_mode=mode)  # fmt: skip
        self.output = Output()
        self.worker = PipelineWorker(Pipeline([self.tts, self.output]), cancel_on_idle_timeout=False)
        started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(worker: Any, frame: Any) -> None:
            started.set()

        self._runner = WorkerRunner()
        await self._runner.add_workers(self.worker)
        self._running = asyncio.create_task(self._runner.run())
        async with asyncio.timeout(self._options.timeout_s):
            await started.wait()

    async def _until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(self._options.timeout_s):
            while not predicate():
                self.output.changed.clear()
                await self.output.changed.wait()

    def _contexts(self) -> list[str]:
        return list(dict.fromkeys(context for _, context, _ in self.output.audio))

    def _heard(self, context: str, since: float) -> Heard:
        audio = [(at, samples) for at, ctx, samples in self.output.audio if ctx == context]
        audio_s = sum(s for _, s in audio) / SAMPLE_RATE
        if not audio:
            return Heard(None, 0.0, time.perf_counter())
        return Heard(audio[0][0] - since, audio_s, audio[0][0] + audio_s)

    async def _send_reply(self, reply: Reply) -> float:
        from pipecat.frames.frames import LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame

        await self.worker.queue_frame(LLMFullResponseStartFrame())
        complete = await _paced(reply, self._options, lambda text: self.worker.queue_frame(LLMTextFrame(text)))
        await self.worker.queue_frame(LLMFullResponseEndFrame())
        return complete

    async def speak(self, reply: Reply) -> Heard:
        before = set(self._contexts())
        complete = await self._send_reply(reply)
        await self._until(lambda: any(c in self.output.stopped for c in self._contexts() if c not in before))
        context = next(c for c in self._contexts() if c not in before)
        return self._heard(context, complete)

    async def interrupt(self, reply: Reply, after_s: float, next_reply: Reply) -> Interrupted:
        from pipecat.frames.frames import InterruptionFrame

        before = set(self._contexts())
        sender = asyncio.create_task(self._send_reply(reply))
        await self._until(lambda: any(c not in before for c in self._contexts()))
        context = next(c for c in self._contexts() if c not in before)
        first = next(at for at, ctx, _ in self.output.audio if ctx == context)
        await asyncio.sleep(max(0.0, first + after_s - time.perf_counter()))
        at = time.perf_counter()
        self.output.interrupted_at = None
        await self.worker.queue_frame(InterruptionFrame())  # at the pipeline's start, as a transport's input puts it
        sender.cancel()  # the LLM stops too
        heard = sum(s for t, ctx, s in self.output.audio if ctx == context and t <= at) / SAMPLE_RATE
        await self._until(lambda: self.output.interrupted_at is not None)
        after = await self.speak(next_reply)
        # Stopped once the interruption reached the output (a real output transport drops
        # what it holds then) and no more of the reply's audio came after it.
        assert self.output.interrupted_at is not None
        late = [t for t, ctx, _ in self.output.audio if ctx == context and t > at]
        return Interrupted(heard, max([self.output.interrupted_at, *late]) - at, None, after)

    @property
    def connects(self) -> int:
        return self.tts.connects

    async def close(self) -> None:
        from pipecat.frames.frames import EndFrame

        await self.worker.queue_frame(EndFrame())
        async with asyncio.timeout(self._options.timeout_s):
            await self._running


# ---- LiveKit: the streaming TTS through SynthesizeStream ------------------------------------------


class LiveKitClient:
    name = "livekit"

    def __init__(self, options: SessionOptions) -> None:
        self._options = options

    async def open(self) -> None:
        from gateway.integrations.livekit import TTS

        self.tts = TTS(base_url=self._options.url, voice=self._options.voice, seed=SEED)

    async def _push(self, stream: Any, reply: Reply) -> float:
        async def push(text: str) -> None:
            stream.push_text(text)

        complete = await _paced(reply, self._options, push)
        stream.end_input()
        return complete

    async def speak(self, reply: Reply) -> Heard:
        first, samples = None, 0
        async with self.tts.stream() as stream:
            sender = asyncio.create_task(self._push(stream, reply))
            async with asyncio.timeout(self._options.timeout_s):
                async for event in stream:
                    first = first or time.perf_counter()
                    samples += event.frame.samples_per_channel
            complete = await sender
        if first is None:
            return Heard(None, 0.0, time.perf_counter())
        return Heard(first - complete, samples / SAMPLE_RATE, first + samples / SAMPLE_RATE)

    async def interrupt(self, reply: Reply, after_s: float, next_reply: Reply) -> Interrupted:
        stream = self.tts.stream()
        sender = asyncio.create_task(self._push(stream, reply))
        first, samples = None, 0
        async with asyncio.timeout(self._options.timeout_s):
            async for event in stream:
                first = first or time.perf_counter()
                samples += event.frame.samples_per_channel
                if time.perf_counter() - first >= after_s:
                    break
        at = time.perf_counter()
        sender.cancel()
        await stream.aclose()  # what AgentSession does on an interruption: no more events after it
        closed = time.perf_counter() - at
        after = await self.speak(next_reply)
        return Interrupted(samples / SAMPLE_RATE, 0.0, closed, after)

    @property
    def connects(self) -> int:
        return self.tts.session.connects

    async def close(self) -> None:
        await self.tts.aclose()


# ---- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.time_scale <= 0 or args.tokens_per_second <= 0 or not 1 <= args.sentences <= 4 or args.replies < 1:
        raise SystemExit("--time-scale and --tokens-per-second must be positive, --sentences 1 to 4, --replies >= 1")
    path = args.out / "integrations.json"
    if args.report_only:
        document = json.loads(path.read_text())
        if document.get("schema") != SCHEMA:
            raise SystemExit(f"{path}: not a {SCHEMA} result")
    else:
        wait_for_quiet(args.quiet_load, args.quiet_wait)
        with tempfile.TemporaryDirectory(prefix="higgs-bench-integrations-") as scratch, Fleet(Path(scratch)) as fleet:
            setup = next(s for s in compare.SETUPS if s.name == "adaptive")
            url = compare.start_setup(fleet, setup, args.time_scale)
            document = asyncio.run(_measure(url, setup.summary, args))
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n")
    readme = args.out / "README.md"
    readme.write_text("\n".join(report_lines(document)))
    print(f"wrote {readme}", file=sys.stderr)
    return 0


async def _measure(url: str, summary: str, args: argparse.Namespace) -> dict[str, Any]:
    options = SessionOptions(url, args.tokens_per_second, args.time_scale, timeout_s=args.timeout)
    clients = [SessionClient(options), PipecatClient(options), LiveKitClient(options), PipecatClient(options, tokens=True)]
    trimmed = [replace(r, sentences=r.sentences[: args.sentences]) for r in replies(args.replies + 1)]
    heard: dict[str, list[Heard]] = {c.name: [] for c in clients}
    interrupted: dict[str, list[Interrupted]] = {name: [] for name in FRAMEWORKS}
    pause = args.pause * args.time_scale
    ready_at = {c.name: 0.0 for c in clients}  # when the client's last reply has played out
    loads: list[float] = []

    async def turn(client: Any) -> None:
        # A reply starts once the last one on its socket played out in real time, as the
        # gateway's player model counts it: the gateway does not know the emulator's time
        # scale, so a reply sooner would wait for the look-ahead window, which a voice
        # agent's next reply, coming after the user answered, never does.
        await asyncio.sleep(max(pause, ready_at[client.name] + pause - time.perf_counter()))

    for client in clients:
        await client.open()
    try:
        for client in clients:  # connections and caches settle, unmeasured
            ready_at[client.name] = (await client.speak(trimmed[0])).played_out_at
        for reply in trimmed[1:]:
            for client in clients:  # turns: the machine's load falls on every client alike
                await turn(client)
                heard[client.name].append(result := await client.speak(reply))
                ready_at[client.name] = result.played_out_at
            loads.append(load_average())
        long_reply = replies(1)[0]  # all four sentences: still speaking when interrupted
        for number in range(args.interruptions):
            for client in (c for c in clients if c.name in FRAMEWORKS):
                await turn(client)
                cut = await client.interrupt(long_reply, args.interrupt_after * args.time_scale,  # type: ignore[attr-defined]
                                             trimmed[1 + number % len(trimmed[1:])])  # fmt: skip
                interrupted[client.name].append(cut)
                ready_at[client.name] = cut.next_reply.played_out_at
        connects = {c.name: c.connects for c in clients}
    finally:
        for client in clients:
            await client.close()
    scale = args.time_scale
    return {
        "schema": SCHEMA, "mode": "integrations", "url": url, "time_scale": scale,
        "machine": f"{os.cpu_count()}-core {platform.machine()}",
        "params": {"replies": args.replies, "sentences": args.sentences, "tokens_per_second": args.tokens_per_second,
                   "chars_per_token": 4, "pause_s": args.pause, "interruptions": args.interruptions,
                   "interrupt_after_s": args.interrupt_after},
        "notes": {"setup": summary, "command": compare._command(), RUN_ID: new_run_id(),
                  "emulator_timing": compare.timing_parameters(),
                  "loadavg_1m": {"min": min(loads), "max": max(loads)} if loads else None},
        "clients": {name: {"first_audio_s": [_modelled(h.first_audio_s, scale) for h in values],
                           "audio_s": [h.audio_s for h in values], "connects": connects[name]}
                    for name, values in heard.items()},
        "interruptions": {name: [{"heard_before_s": i.heard_before_s, "audio_after_s": i.audio_after_s / scale,
                                  "close_s": _modelled(i.close_s, scale),
                                  "next_first_audio_s": _modelled(i.next_reply.first_audio_s, scale),
                                  "next_audio_s": i.next_reply.audio_s} for i in values]
                          for name, values in interrupted.items()},
    }  # fmt: skip


def _modelled(wall: float | None, scale: float) -> float | None:
    return None if wall is None else wall / scale


# ---- the report ---------------------------------------------------------------------------------


def _p50(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return percentile(present, 50) if present and len(present) == len(values) else None


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    value: float | None
    relation: str
    bound: float | None
    met: bool


def targets(document: dict[str, Any]) -> list[Target]:
    clients, interruptions = document["clients"], document["interruptions"]
    reference = _p50(clients["session"]["first_audio_s"])
    found: list[Target] = []
    for name in FRAMEWORKS:
        mine = _p50(clients[name]["first_audio_s"])
        bound = None if reference is None else reference * FIRST_AUDIO_SHARE
        found.append(Target(f"{name}: first audio p50 vs the session client's", mine, "<= 110% of",
                            bound, mine is not None and bound is not None and mine <= bound))  # fmt: skip
    for name in FRAMEWORKS:
        worst = max((i["audio_after_s"] for i in interruptions[name]), default=None)
        found.append(Target(f"{name}: interruption to the reply's audio stopped, worst", worst, "<=",
                            INTERRUPT_STOP_S, worst is not None and worst <= INTERRUPT_STOP_S))  # fmt: skip
        spoke = all(i["next_first_audio_s"] is not None and i["next_audio_s"] > 0 for i in interruptions[name])
        connects = clients[name]["connects"]
        found.append(Target(f"{name}: sockets opened over the run (next reply spoken after every interruption)",
                            connects, "=", 1, connects == 1 and spoke and bool(interruptions[name])))  # fmt: skip
    return found


def report_lines(document: dict[str, Any]) -> list[str]:
    scale, clients, interruptions = document["time_scale"], document["clients"], document["interruptions"]
    params, notes = document["params"], document["notes"]
    found = targets(document)
    load = notes.get("loadavg_1m")
    lines = [
        "# Voice-agent integrations over sessions (emulated)",
        "",
        f"Reproduce: `{notes['command']}`",
        "",
        f"One gateway over emulated workers ({notes['setup']}) at time scale {scale:g}; every time is converted to "
        "modelled (H200-equivalent) seconds. Four clients, each on one socket for the whole run, take turns "
        f"speaking the same {params['sentences']}-sentence replies streamed at {params['tokens_per_second']:g} "
        "tokens/s (4 characters a token): `session`, the sessions benchmark's own client (its first audio is "
        "`bench sessions`' session figure, measured again in this run); `pipecat`, a Pipecat pipeline with "
        "`HiggsSessionTTSService` and a sink at its end; `livekit`, the LiveKit TTS read through LiveKit's "
        "`SynthesizeStream`; and `pipecat-tokens`, the same Pipecat service with `TextAggregationMode.TOKEN` (each "
        "token handed on as it comes, the gateway cutting the sentences), for comparison only. First audio counts "
        "from the moment the first sentence's text was complete to the first audio at the client's output. A "
        "client's reply starts once its previous one has played out in real time, as the gateway's player model "
        "counts it (the gateway does not know the emulator's time scale: sooner, the reply would wait for the "
        "look-ahead window, which a voice agent's next reply, coming after the user answered, does not). Each "
        f"framework is then interrupted {params['interrupt_after_s']:g} s (modelled) after a reply's first audio "
        "and speaks the next reply at once.",
        "",
        "## Targets",
        "",
        f"{sum(t.met for t in found)} of {len(found)} met; every client measured in the same run.",
        "",
        "| target | measured | must be | bound | met |",
        "|---|---:|---|---:|:---:|",
        *[f"| {t.name} | {_fmt(t.value)} | {t.relation} | {_fmt(t.bound)} | {'yes' if t.met else '**no**'} |"
          for t in found],
        "",
        "## First audio",
        "",
        "| client | replies | first audio p50 / max (ms) | audio per reply p50 (s) | sockets opened |",
        "|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name in CLIENTS:
        values = [v for v in clients[name]["first_audio_s"] if v is not None]
        audio = percentile(clients[name]["audio_s"], 50) if clients[name]["audio_s"] else None
        lines.append(f"| {name} | {len(clients[name]['first_audio_s'])} | {_ms(_p50(clients[name]['first_audio_s']))} / "
                     f"{_ms(max(values) if values else None)} | {_fmt(audio)} | {clients[name]['connects']} |")  # fmt: skip
    lines += [
        "",
        "## Interruptions",
        "",
        "Audio stops: from the interruption to the reply's last audio at the output, or, for Pipecat, to the "
        "`InterruptionFrame` reaching the output (queued at the pipeline's start, as a transport's input puts it; "
        "a real output transport drops the audio it holds when it arrives), whichever is later; LiveKit's stream "
        "yields nothing once closed (AgentSession stops its output itself). Close: "
        "LiveKit's `stream.aclose()`, which returns once the gateway answered `input.cancelled` (every request of "
        "the reply cancelled upstream, nothing more of it on the socket). Next reply: its first audio, counted as "
        "above, on the same socket.",
        "",
        "| client | interruptions | heard before (s) | audio stops, worst (ms) | close p50 / max (ms) | "
        "next reply first audio p50 / max (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name in FRAMEWORKS:
        rows = interruptions[name]
        closes = [r["close_s"] for r in rows if r["close_s"] is not None]
        nexts = [r["next_first_audio_s"] for r in rows if r["next_first_audio_s"] is not None]
        before = percentile([r["heard_before_s"] for r in rows], 50) if rows else None
        lines.append(f"| {name} | {len(rows)} | {_fmt(before)} | {_ms(max((r['audio_after_s'] for r in rows), default=None))} | "
                     f"{_ms(percentile(closes, 50) if closes else None)} / {_ms(max(closes) if closes else None)} | "
                     f"{_ms(percentile(nexts, 50) if nexts else None)} / {_ms(max(nexts) if nexts else None)} |")  # fmt: skip
    lines += [
        "",
        f"Machine: {document['machine']}, shared: the load generator, the four clients, the gateway and the emulated "
        "workers run on it, beside other jobs"
        + (f" (1-minute load average {load['min']:.1f}–{load['max']:.1f} during the replies)." if load else "."),
        "",
    ]
    return lines


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value != int(value) else f"{value:g}"
