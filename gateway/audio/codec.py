"""mp3, aac, opus and flac: one continuous PyAV encoder and muxer per request.

Each request gets a single encoder + muxer writing into an in-memory sink that is drained
after every call. One file per chunk would put gaps, clicks and wrong durations into the
stream; draining per call hands the client each packet as soon as the codec releases it.

The worker's first chunk is one 40 ms frame, then nothing for ~200-300 ms. MP3 and AAC
hold more than that in look-ahead, so by themselves their first packet would wait for the
worker's second chunk. ``EarlyStart`` gets it out at once: silence is fed right behind the
first chunk (it lands in the worker's own hole, where a real-time player has nothing to
play anyway) so the codec releases every packet holding the first chunk; the packets that
encode nothing but that silence are then dropped from the stream. What stays is one
continuous encoder's output with a short pause after the first 40 ms (less than a frame
plus the margin the codec needs to resume cleanly): no seam, no click, and the decoded
length one packet longer than without it (mp3: one or two of its 24 ms frames).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import av

from gateway.audio.encoder import EncoderClosedError
from gateway.audio.formats import AudioFormat
from gateway.audio.frames import PCM_LAYOUT, pcm_to_frame
from gateway.audio.pcm import BYTES_PER_FRAME, SampleAligner
from gateway.types.codec import SAMPLE_RATE

# Every muxer: hand each packet to the sink at once. Left to the I/O layer's own choice,
# packets may wait in a 32 KiB buffer: seconds of compressed speech held back.
_FLUSH_EVERY_PACKET = {"flush_packets": "1"}


@dataclass(frozen=True, slots=True)
class EarlyStart:
    """A codec's framing, for releasing the packets of the first chunk with that chunk.

    Measured for these encoders at 24 kHz (decoded with ffmpeg, compared with the input):
    the cut is clean (error at the codec's own noise level) with these margins.
    """

    frame_samples: int  # samples per packet
    delay_samples: int  # decoded position of the first input sample (priming + decoder delay)
    settle_samples: int  # silence the codec needs after the cut before real audio resumes
    dropped_packets: int = 2  # silent packets cut out: the look-ahead the padding paid for

    def padding(self, first_samples: int) -> tuple[int, range]:
        """(silence to feed behind a first chunk of ``first_samples``, packet indices to drop).

        The kept packets before the cut decode to the whole first chunk; the padding is what
        fills their last frame, the dropped packets and the settle margin, so the silence
        left in the stream is less than one frame plus the margin.
        """
        frame = self.frame_samples
        kept = math.ceil((self.delay_samples + first_samples) / frame)
        fill = kept * frame - (self.delay_samples + first_samples)
        silence = fill + self.dropped_packets * frame + self.settle_samples
        return silence, range(kept, kept + self.dropped_packets)


@dataclass(frozen=True, slots=True)
class CodecProfile:
    """How one response format is produced: muxer, encoder, and the options that make it stream."""

    muxer: str
    codec: str
    bit_rate: int | None = None
    muxer_options: Mapping[str, str] = field(default_factory=dict)
    codec_options: Mapping[str, str] = field(default_factory=dict)
    early_start: EarlyStart | None = None  # None: the first chunk already yields a packet


CODEC_PROFILES: Mapping[AudioFormat, CodecProfile] = MappingProxyType(
    {
        AudioFormat.MP3: CodecProfile(
            muxer="mp3",
            codec="libmp3lame",
            bit_rate=64_000,
            # A Xing/Info header claims a length and seek table the live stream cannot
            # know (players then report wrong durations); an ID3 tag is bytes in front
            # of the first audio frame that nobody needs.
            muxer_options={**_FLUSH_EVERY_PACKET, "write_xing": "0", "id3v2_version": "0"},
            # No bit reservoir: a frame's data may otherwise start inside the frames before
            # it, and the silent frames cut out by EarlyStart would take it along. Each frame
            # self-contained is also what a client joining or resuming mid-stream needs.
            codec_options={"reservoir": "0"},
            # MPEG-2 Layer III: 576-sample frames; LAME's 576 + the decoder's 529 samples delay.
            early_start=EarlyStart(frame_samples=576, delay_samples=1105, settle_samples=640),
        ),
        AudioFormat.AAC: CodecProfile(
            muxer="adts",  # self-framing AAC: playable from any point, no global header
            codec="aac",
            bit_rate=64_000,
            muxer_options=_FLUSH_EVERY_PACKET,
            # 1024-sample frames, 1024 samples of priming (ffmpeg's native encoder).
            early_start=EarlyStart(frame_samples=1024, delay_samples=1024, settle_samples=576),
        ),
        AudioFormat.OPUS: CodecProfile(
            muxer="ogg",
            codec="libopus",  # takes 24 kHz directly; decoders play Opus at 48 kHz
            bit_rate=32_000,
            # The Ogg default (1 s pages) holds back up to a second of audio per page.
            muxer_options={**_FLUSH_EVERY_PACKET, "page_duration": "20000"},  # microseconds
            # A first chunk shorter than two 20 ms packets (stretched by speed > 1) would
            # leave the muxer with the one packet it holds back: fill it up to two.
            early_start=EarlyStart(frame_samples=480, delay_samples=0, settle_samples=480, dropped_packets=0),
        ),
        AudioFormat.FLAC: CodecProfile(
            muxer="flac",
            codec="flac",
            # No 8 KiB PADDING block: it only serves in-place tag edits of files on disk
            # and would be the largest part of the first bytes sent.
            muxer_options={**_FLUSH_EVERY_PACKET, "metadata_header_padding": "0"},
            # 960 samples = 40 ms, the model's codec hop and the worker's first chunk:
            # the first FLAC frame leaves with the first chunk instead of ~100 ms later.
            codec_options={"frame_size": "960"},
            # A first chunk shorter than a block (stretched by speed > 1): fill the block.
            early_start=EarlyStart(frame_samples=960, delay_samples=0, settle_samples=0, dropped_packets=0),
        ),
    }
)


class _DrainableSink:
    """A write-only, non-seekable byte sink for the muxer.

    Non-seekable on purpose: a muxer that can seek goes back to patch headers at the end,
    rewriting bytes the client already has.
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(data)
        return len(data)

    def drain(self) -> bytes:
        """Everything written since the last drain."""
        if not self._parts:
            return b""
        data = b"".join(self._parts)
        self._parts.clear()
        return data


class CodecStreamEncoder:
    """A PyAV encoder + muxer turning worker PCM into one continuous ``profile`` stream."""

    def __init__(self, profile: CodecProfile, early_start: bool = True, sample_rate: int = SAMPLE_RATE) -> None:
        self._align = SampleAligner().align
        self._sink = _DrainableSink()
        self._samples_in = 0
        # Until the first audio: the codec's EarlyStart (None once used, or when off). Its
        # frame counts are the workers' 24 kHz samples: at another rate (a request's
        # sample_rate) the codec's frames hold other counts, so such a stream starts late.
        self._early_start = profile.early_start if early_start and sample_rate == SAMPLE_RATE else None
        self._dropped: range = range(0)  # packet indices cut out of the stream
        self._packets = 0  # packets the codec produced so far, dropped ones included
        container = av.open(
            self._sink, "w", format=profile.muxer, container_options=dict(profile.muxer_options)
        )
        try:
            stream = container.add_stream(
                # At another rate than the workers' 24 kHz (a request's sample_rate),
                # PyAV resamples each frame on its way into the codec.
                profile.codec, rate=sample_rate, options=dict(profile.codec_options)
            )
            stream.layout = PCM_LAYOUT
            if profile.bit_rate is not None:
                stream.bit_rate = profile.bit_rate
        except BaseException:
            container.close()
            raise
        self._container: av.container.OutputContainer | None = container
        self._stream: av.audio.stream.AudioStream | None = stream

    def encode(self, pcm: bytes) -> bytes:
        container, stream = self._require_open("encode")
        whole = self._align(pcm)
        if not whole:
            return b""
        samples = len(whole) // BYTES_PER_FRAME
        early, self._early_start = self._early_start, None
        if early is not None:
            silence, self._dropped = early.padding(samples)
            whole += bytes(silence * BYTES_PER_FRAME)
            samples += silence
        frame = pcm_to_frame(whole, pts=self._samples_in)
        self._samples_in += samples
        self._mux(container, stream.encode(frame))
        return self._sink.drain()

    def _mux(self, container: av.container.OutputContainer, packets: Iterable[av.Packet]) -> None:
        for packet in packets:
            index = self._packets
            self._packets += 1
            if index not in self._dropped:
                container.mux(packet)

    def finish(self) -> bytes:
        container, stream = self._require_open("finish")
        try:
            container.start_encoding()  # even with no audio at all, send a well-formed header
            self._mux(container, stream.encode(None))  # drain the codec's look-ahead
            container.close()  # trailer (ogg: the last page; flac: nothing, it cannot seek)
            return self._sink.drain()
        finally:
            self.close()  # a second container.close() is a no-op

    def close(self) -> None:
        container = self._container
        if container is None:
            return
        # Dropping the last references frees the codec and muxer contexts at once (PyAV
        # frees them on deallocation): nothing native outlives the request, even while
        # a suspended response generator still holds this object.
        self._container = self._stream = None
        try:
            container.close()
        except Exception:  # noqa: BLE001 -- the request is over; nobody reads this tail
            pass
        finally:
            self._sink.drain()

    def _require_open(
        self, operation: str
    ) -> tuple[av.container.OutputContainer, av.audio.stream.AudioStream]:
        if self._container is None or self._stream is None:
            raise EncoderClosedError(f"{operation}() after the encoder was finished or closed")
        return self._container, self._stream
