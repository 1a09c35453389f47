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
plus the margin the codec needs to resume cleanly): no seam, no click.

Decoders play more than the speech: the codec's priming and last-packet padding, and that
pause (mp3 and aac came out 50-130 ms longer than pcm). mp3 declares its priming in an
"Info" frame in front (``lame_info_frame``: the encoder delay only, no length); ADTS has
no way to say it. What is still over is taken back from the quiet the speech ends in
(``_QuietTail``): quiet at the end of a chunk is held back until more audio follows, and
at the end as much of it as the stream gained is left out, so the decoded stream lasts
as long as the worker's audio to within half a packet. Nothing louder than -40 dBFS is
ever left out; a clip that ends without that much quiet stays longer by the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import av
import numpy as np

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
class DecodedLength:
    """How many samples a decoder (ffmpeg's, PyAV's) plays for the samples fed to the encoder.

    ``frame_samples`` per packet; the encoder puts ``lead_samples`` of priming in front, ends
    with ``tail_packets`` more than the fed samples fill, and the decoder skips ``skip_samples``
    at the start (signalled in the stream, or 0 when the format has no way to say it).
    """

    frame_samples: int
    lead_samples: int
    tail_packets: int = 0
    skip_samples: int = 0

    def decoded(self, fed: int, dropped_packets: int = 0) -> int:
        packets = math.ceil((self.lead_samples + fed) / self.frame_samples) + self.tail_packets - dropped_packets
        return packets * self.frame_samples - self.skip_samples


@dataclass(frozen=True, slots=True)
class CodecProfile:
    """How one response format is produced: muxer, encoder, and the options that make it stream."""

    muxer: str
    codec: str
    bit_rate: int | None = None
    muxer_options: Mapping[str, str] = field(default_factory=dict)
    codec_options: Mapping[str, str] = field(default_factory=dict)
    early_start: EarlyStart | None = None  # None: the first chunk already yields a packet
    # Set when a decoder plays more than it was given (priming, padding, the early start's
    # pause): that much is taken back from the quiet the speech ends in (see ``_QuietTail``).
    decoded_length: DecodedLength | None = None
    lame_info_frame: bool = False  # mp3: an "Info" frame in front declaring the encoder delay


CODEC_PROFILES: Mapping[AudioFormat, CodecProfile] = MappingProxyType(
    {
        AudioFormat.MP3: CodecProfile(
            muxer="mp3",
            codec="libmp3lame",
            bit_rate=64_000,
            # FFmpeg's Xing/Info header claims a length and seek table the live stream cannot
            # know (players then report wrong durations), and it is written only where the
            # output can seek; the encoder writes its own Info frame instead (``lame_info_frame``,
            # length unknown, encoder delay declared). An ID3 tag is bytes in front of the
            # first audio frame that nobody needs.
            muxer_options={**_FLUSH_EVERY_PACKET, "write_xing": "0", "id3v2_version": "0"},
            # No bit reservoir: a frame's data may otherwise start inside the frames before
            # it, and the silent frames cut out by EarlyStart would take it along. Each frame
            # self-contained is also what a client joining or resuming mid-stream needs.
            codec_options={"reservoir": "0"},
            # MPEG-2 Layer III: 576-sample frames; LAME's 576 + the decoder's 529 samples delay.
            early_start=EarlyStart(frame_samples=576, delay_samples=1105, settle_samples=640),
            # LAME flushes one packet beyond the samples fed; the Info frame's declared delay
            # has decoders skip LAME's 576 plus their own 529 samples. FFmpeg reads the delay
            # but, as the tag counts no frames, also decodes the Info frame itself: one more
            # silent packet (decoders that skip the tag frame play 576 samples less).
            decoded_length=DecodedLength(frame_samples=576, lead_samples=576, tail_packets=2, skip_samples=1105),
            lame_info_frame=True,
        ),
        AudioFormat.AAC: CodecProfile(
            muxer="adts",  # self-framing AAC: playable from any point, no global header
            codec="aac",
            bit_rate=64_000,
            muxer_options=_FLUSH_EVERY_PACKET,
            # 1024-sample frames, 1024 samples of priming (ffmpeg's native encoder).
            early_start=EarlyStart(frame_samples=1024, delay_samples=1024, settle_samples=576),
            # ADTS cannot say that the first 1024 decoded samples are priming: decoders play them.
            decoded_length=DecodedLength(frame_samples=1024, lead_samples=1024),
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
        self._samples_in = 0  # samples fed to the codec, the early start's silence included
        self._given = 0  # samples the caller gave
        # Until the first audio: the codec's EarlyStart (None once used, or when off). Its
        # frame counts are the workers' 24 kHz samples: at another rate (a request's
        # sample_rate) the codec's frames hold other counts, so such a stream starts late.
        self._early_start = profile.early_start if early_start and sample_rate == SAMPLE_RATE else None
        self._dropped: range = range(0)  # packet indices cut out of the stream
        self._packets = 0  # packets the codec produced so far, dropped ones included
        self._info_frame = profile.lame_info_frame  # still to be written in front of the first packet
        # The quiet tail held back to even out the decoded length (counted in 24 kHz samples too).
        length = profile.decoded_length if sample_rate == SAMPLE_RATE else None
        self._quiet = _QuietTail(length) if length is not None else None
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
        self._given += len(whole) // BYTES_PER_FRAME
        early, self._early_start = self._early_start, None
        if early is not None:
            silence, self._dropped = early.padding(len(whole) // BYTES_PER_FRAME)
            whole += bytes(silence * BYTES_PER_FRAME)
            if self._quiet is not None:
                self._quiet.added(silence - len(self._dropped) * early.frame_samples)
        elif self._quiet is not None:
            whole = self._quiet.hold(whole)  # never the first audio: it leaves at once
        self._feed(container, stream, whole)
        return self._sink.drain()

    def _feed(self, container: av.container.OutputContainer, stream: av.audio.stream.AudioStream, pcm: bytes) -> None:
        if not pcm:
            return
        frame = pcm_to_frame(pcm, pts=self._samples_in)
        self._samples_in += len(pcm) // BYTES_PER_FRAME
        self._mux(container, stream.encode(frame))

    def _mux(self, container: av.container.OutputContainer, packets: Iterable[av.Packet]) -> None:
        for packet in packets:
            index = self._packets
            self._packets += 1
            if index in self._dropped:
                continue
            if self._info_frame:
                self._info_frame = False
                self._sink.write(lame_info_frame(bytes(packet), encoder_delay=_LAME_ENCODER_DELAY))
            container.mux(packet)

    def finish(self) -> bytes:
        container, stream = self._require_open("finish")
        try:
            if self._quiet is not None:
                self._feed(container, stream, self._quiet.release(self._samples_in, self._given, len(self._dropped)))
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


# A sample no louder than this (-40 dBFS) is not speech: the quiet a clip ends in.
QUIET_PEAK = 328


class _QuietTail:
    """Evens out the decoded length with the quiet the speech ends in.

    A decoder plays the codec's priming and last-packet padding, and the early start's
    pause, on top of the speech: mp3 and aac streams came out 50-130 ms longer than the
    worker's audio. Quiet at the end of each chunk (never the first chunk) is held back
    instead of encoded at once; when more audio follows, it goes out in front of it,
    unchanged. At the end, as much of the held quiet as the stream gained is left out, so
    the decoded stream ends within half a packet of the worker's audio. Nothing louder
    than ``QUIET_PEAK`` is held, so no speech is ever cut; a clip that ends without quiet
    stays as long as before.
    """

    __slots__ = ("_held", "_length", "_limit")

    def __init__(self, length: DecodedLength) -> None:
        self._length = length
        self._held = b""
        # Held at most: what the stream can gain without the early start (priming, tail
        # packets, the last packet's padding) and the half packet ``release`` may round over.
        frame = length.frame_samples
        self._limit = length.lead_samples + (length.tail_packets + 1) * frame - length.skip_samples + frame // 2

    def added(self, silence: int) -> None:
        """The early start left ``silence`` samples in the stream: hold up to that much more."""
        self._limit += max(0, silence)

    def hold(self, pcm: bytes) -> bytes:
        """What to encode now of the held quiet and ``pcm``; the quiet end of it stays held."""
        pcm = self._held + pcm
        window = np.frombuffer(pcm, dtype="<i2")[-self._limit :]
        loud = np.flatnonzero(np.abs(window.astype(np.int32)) > QUIET_PEAK)
        quiet = len(window) - (int(loud[-1]) + 1 if len(loud) else 0)
        cut = len(pcm) - quiet * BYTES_PER_FRAME
        self._held = pcm[cut:]
        return pcm[:cut]

    def release(self, fed: int, given: int, dropped_packets: int) -> bytes:
        """The held quiet minus what the stream gained over ``given`` samples of audio: the
        fewest samples left out that bring the decoded length within half a packet."""
        held, self._held = self._held, b""
        quiet = len(held) // BYTES_PER_FRAME
        if not quiet:
            return held
        length = self._length
        left_out = np.arange(quiet + 1)
        packets = -((left_out - (length.lead_samples + fed + quiet)) // length.frame_samples)  # ceil
        decoded = (packets + length.tail_packets - dropped_packets) * length.frame_samples - length.skip_samples
        off = np.abs(decoded - given)
        close = np.flatnonzero(off <= length.frame_samples // 2)
        trim = int(close[0]) if len(close) else int(np.argmin(off))
        return held[: (quiet - trim) * BYTES_PER_FRAME]


# LAME's own delay in front of the first input sample (decoders add their 529 on top).
_LAME_ENCODER_DELAY = 576
_INFO_ENCODER = ("Lavc%d.%d" % av.library_versions["libavcodec"][:2]).encode().ljust(9)[:9]


def lame_info_frame(first_frame: bytes, encoder_delay: int) -> bytes:
    """An MPEG audio frame holding an "Info" tag that declares only the encoder delay.

    What FFmpeg's muxer writes in front of a seekable file, minus everything a live stream
    cannot know: no frame count, byte count or seek table (so it claims no length), no end
    padding. Decoders that read the LAME extension skip the priming (FFmpeg and what builds
    on it; without a frame count FFmpeg also plays the tag frame itself, as silence). Any
    other decoder plays it as one frame of silence: it holds no audio data. ``first_frame``
    is the stream's first audio frame: the tag frame copies its header.
    """
    header = bytearray(first_frame[:4])
    padded = bool(header[2] & 0x02)
    header[1] |= 0x01  # no CRC after the header
    header[2] &= ~0x02 & 0xFF  # no padding byte
    size = len(first_frame) - (1 if padded else 0)  # CBR: every frame the same size but padding
    mpeg1 = bool(header[1] & 0x08)
    mono = (header[3] >> 6) == 3
    side_info = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    tag = bytearray(b"Info")
    tag += (0).to_bytes(4, "big")  # flags: no frames, bytes, TOC or quality fields
    tag += _INFO_ENCODER  # 9 bytes: the encoder's short version
    tag += bytes([0x01])  # tag revision 0, CBR
    tag += bytes(1 + 4 + 2 + 2 + 1 + 1)  # lowpass, peak, two replay gains, flags, bitrate: unset
    tag += ((encoder_delay & 0xFFF) << 12).to_bytes(3, "big")  # delay; end padding unknown (0)
    tag += bytes(1 + 1 + 2 + 4 + 2)  # misc, mp3 gain, preset, music length and CRC: unknown
    frame = bytearray(size)
    frame[:4] = header
    offset = 4 + side_info
    frame[offset : offset + len(tag)] = tag
    crc_at = offset + len(tag)
    frame[crc_at : crc_at + 2] = _crc16(bytes(frame[:crc_at])).to_bytes(2, "big")
    return bytes(frame)


def _crc16(data: bytes) -> int:
    """CRC-16 (polynomial 0x8005, reflected: 0xA001), as the LAME tag's own checksum."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc
