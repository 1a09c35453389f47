"""``speed``: time-stretch the stream without changing pitch (ffmpeg ``atempo``), as it flows.

The workers refuse ``speed`` != 1 while streaming, so the gateway stretches the PCM
itself, before the format encoder. At speed 1 nothing here is constructed at all.
"""

from __future__ import annotations

import errno
import math

import av
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

    def __init__(self, speed: float) -> None:
        self._align = SampleAligner().align
        self._speed = speed
        self._samples_in = 0
        self._samples_out = 0
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
        self._graph: av.filter.Graph | None = graph

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
        self._samples_out += len(ready) // BYTES_PER_FRAME
        return ready

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
            tail = b"".join(out)
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
