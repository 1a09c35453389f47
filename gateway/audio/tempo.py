"""``speed``: time-stretch the stream without changing pitch (ffmpeg ``atempo``), as it flows.

The workers refuse ``speed`` != 1 while streaming, so the gateway stretches the PCM
itself, before the format encoder. At speed 1 nothing here is constructed at all.

atempo needs about one window (1024 samples at 24 kHz) of input before it emits anything,
more than the worker's 40 ms first chunk, and the next chunk comes ~250 ms later. So the
first chunk is also stretched by a throw-away filter that is flushed at once (its tail
carried out by silence, as at the end of a stream) and sent; the request's own filter,
fed the same audio, continues the stream from exactly that many output samples on. The
length stays ``input / speed``, and the one seam falls where the worker's hole is.
"""

from __future__ import annotations

import errno
import math

import av
import numpy as np
from av.error import FFmpegError

from gateway.audio.encoder import EncoderClosedError, StreamEncoder
from gateway.audio.frames import (
    PCM_LAYOUT,
    PCM_SAMPLE_FORMAT,
    PCM_TIME_BASE,
    frame_to_pcm,
    pcm_to_frame,
)
from gateway.audio.pcm import BYTES_PER_FRAME, SampleAligner
from gateway.types.codec import SAMPLE_RATE

MIN_SPEED = 0.25
MAX_SPEED = 4.0
# Older ffmpeg accepts 0.5..2.0 per atempo instance; larger changes chain instances.
_ATEMPO_MIN = 0.5
_ATEMPO_MAX = 2.0
# atempo emits a frame only once it has filled one as long as its input frame, so a
# 1 s upstream chunk pushed whole would come out ~1 s late. Feeding 40 ms pieces (the
# model's codec hop) bounds that lag to 40 ms per atempo instance.
_PUSH_SAMPLES = 960
# The first chunk's own stretch and the stream's filter differ near the seam (the first
# fades into the silence that flushed it): 10 ms of cross-fade hide the step.
_CROSSFADE_SAMPLES = 240


def validate_speed(speed: float) -> float:
    """``speed`` as a float if OpenAI allows it (0.25..4.0), else ``ValueError``."""
    value = float(speed)
    if not (math.isfinite(value) and MIN_SPEED <= value <= MAX_SPEED):
        raise ValueError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed!r}")
    return value


def atempo_factors(speed: float) -> list[float]:
    """Equal per-instance factors within 0.5..2.0 whose product is ``speed``."""
    validate_speed(speed)
    stages = max(1, math.ceil(abs(math.log2(speed)) - 1e-9))
    factor = speed ** (1.0 / stages)
    return [min(max(factor, _ATEMPO_MIN), _ATEMPO_MAX)] * stages


# Silence pushed at the end so atempo releases the input it still holds (> its window).
_FLUSH_PADDING_SAMPLES = SAMPLE_RATE // 4


class TempoStretcher:
    """Streaming PCM -> PCM tempo change through a PyAV filter graph (atempo chain)."""

    def __init__(self, speed: float, early_start: bool = True) -> None:
        self._align = SampleAligner().align
        self._speed = speed
        self._samples_in = 0
        self._samples_out = 0
        self._early_start = early_start  # stretch the first audio at once (see the module doc)
        self._skip_bytes = 0  # this filter's output already sent by the first chunk's own
        self._held = b""  # the first chunk's stretched tail, cross-faded into this filter's output
        self._overlap = b""  # this filter's output collected for that cross-fade
        self._graph: av.filter.Graph | None = _atempo_graph(speed)

    def process(self, pcm: bytes) -> bytes:
        """Stretch the next PCM; returns the stretched PCM ready now, possibly ``b""``."""
        graph = self._require_graph()
        whole = memoryview(self._align(pcm))
        step = _PUSH_SAMPLES * BYTES_PER_FRAME
        out: list[memoryview] = []
        for start in range(0, len(whole), step):
            piece = whole[start : start + step]
            graph.push(pcm_to_frame(piece, pts=self._samples_in))
            self._samples_in += len(piece) // BYTES_PER_FRAME
            self._pull_ready(graph, out)
        ready = b"".join(out)
        if self._early_start and whole:
            self._early_start = False
            ready = self._start_early(bytes(whole), ready)
        elif self._skip_bytes or self._held:
            ready = self._rejoin(ready)
        self._samples_out += len(ready) // BYTES_PER_FRAME
        return ready

    def _start_early(self, first_pcm: bytes, ready: bytes) -> bytes:
        """The first audio stretched by a filter of its own, minus a short tail kept to
        cross-fade into this filter's output (the probe's tail fades into its padding)."""
        first = _stretch_alone(self._speed, first_pcm)
        held = min(_CROSSFADE_SAMPLES * BYTES_PER_FRAME, len(first) // 2 // BYTES_PER_FRAME * BYTES_PER_FRAME)
        sent = first[: len(first) - held]
        self._held = first[len(sent) :]
        self._skip_bytes = len(sent)  # this filter's output for the same audio, already sent
        return sent + self._rejoin(ready)

    def _rejoin(self, ready: bytes) -> bytes:
        """This filter's output once the first audio's own is over: skip what was sent, then
        cross-fade from the held tail."""
        if self._skip_bytes:
            skipped = min(self._skip_bytes, len(ready))
            self._skip_bytes -= skipped
            ready = ready[skipped:]
        if not self._held or not ready:
            return ready
        self._overlap += ready
        held = self._held
        if len(self._overlap) < len(held):
            return b""
        overlap, self._overlap, self._held = self._overlap, b"", b""
        return _crossfade(held, overlap[: len(held)]) + overlap[len(held) :]

    def flush(self) -> bytes:
        """The stretched tail, so that the whole output lasts input / speed; the stretcher
        is closed afterwards.

        atempo keeps a window of input it has not emitted; at end of stream it drops it, so
        a short clip (one 40 ms frame) would come out empty. Silence pushed behind the last
        sample carries the real tail out, and the output is then cut to the exact length.
        """
        graph = self._require_graph()
        out: list[memoryview] = []
        try:
            expected = round(self._samples_in / self._speed)
            padding = _FLUSH_PADDING_SAMPLES * max(1, round(self._speed))
            silence = bytes(_PUSH_SAMPLES * BYTES_PER_FRAME)
            pushed = 0
            while pushed < padding:
                graph.push(pcm_to_frame(silence, pts=self._samples_in + pushed))
                pushed += _PUSH_SAMPLES
                self._pull_ready(graph, out)
            graph.push(None)
            self._pull_ready(graph, out)
            tail = self._rejoin(b"".join(out)) + self._held  # held: only if the stream was that short
            missing = max(0, expected - self._samples_out) * BYTES_PER_FRAME
            return tail[:missing] + bytes(max(0, missing - len(tail)))
        finally:
            self.close()

    def close(self) -> None:
        # PyAV frees the filter graph when its last reference goes.
        self._graph = None

    def _require_graph(self) -> av.filter.Graph:
        if self._graph is None:
            raise EncoderClosedError("the tempo stretcher was flushed or closed")
        return self._graph

    @staticmethod
    def _pull_ready(graph: av.filter.Graph, out: list[memoryview]) -> None:
        while True:
            try:
                frame = graph.pull()
            except EOFError:
                return
            except FFmpegError as error:
                if error.errno == errno.EAGAIN:  # needs more input
                    return
                raise
            out.append(frame_to_pcm(frame))


class TimeStretchedEncoder:
    """Any ``StreamEncoder`` fed through a ``TempoStretcher`` first."""

    def __init__(self, inner: StreamEncoder, stretcher: TempoStretcher) -> None:
        self._inner = inner
        self._stretcher = stretcher

    def encode(self, pcm: bytes) -> bytes:
        return self._inner.encode(self._stretcher.process(pcm))

    def finish(self) -> bytes:
        try:
            head = self._inner.encode(self._stretcher.flush())
            return head + self._inner.finish()
        finally:
            self.close()

    def close(self) -> None:
        self._stretcher.close()
        self._inner.close()


def _atempo_graph(speed: float) -> av.filter.Graph:
    graph = av.filter.Graph()
    source = graph.add_abuffer(
        sample_rate=SAMPLE_RATE,
        format=PCM_SAMPLE_FORMAT,
        layout=PCM_LAYOUT,
        time_base=PCM_TIME_BASE,
    )
    stages = [graph.add("atempo", repr(factor)) for factor in atempo_factors(speed)]
    # Pin the output to the workers' PCM layout: format negotiation is free to pick
    # another sample format atempo supports, and raw bytes of that would be noise.
    pin = graph.add(
        "aformat",
        sample_fmts=PCM_SAMPLE_FORMAT,
        sample_rates=str(SAMPLE_RATE),
        channel_layouts=PCM_LAYOUT,
    )
    graph.link_nodes(source, *stages, pin, graph.add("abuffersink"))
    graph.configure()
    return graph


def _stretch_alone(speed: float, pcm: bytes) -> bytes:
    """``pcm`` stretched as if the stream ended right after it: exactly ``len / speed`` long."""
    probe = TempoStretcher(speed, early_start=False)
    try:
        return probe.process(pcm) + probe.flush()
    finally:
        probe.close()


def _crossfade(fading_out: bytes, fading_in: bytes) -> bytes:
    a = np.frombuffer(fading_out, dtype="<i2").astype(np.float32)
    b = np.frombuffer(fading_in, dtype="<i2").astype(np.float32)
    ramp = np.linspace(0.0, 1.0, len(a), endpoint=False, dtype=np.float32)
    return np.rint(a + (b - a) * ramp).astype("<i2").tobytes()
