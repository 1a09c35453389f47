"""``sample_rate``: the requested output rate, made from the workers' 24 kHz PCM as it flows.

A Higgs worker refuses every ``sample_rate`` (its adapter lists no output rates), so the
gateway resamples: PCM and WAV through one streaming ffmpeg resampler per request (WAV's
header then names the new rate), the codecs by opening the codec at that rate (PyAV
resamples each frame on its way in). At the workers' own rate nothing here is built.
"""

from __future__ import annotations

import struct

import av

from gateway.audio.codec import CODEC_PROFILES, CodecStreamEncoder
from gateway.audio.encoder import EncoderClosedError, StreamEncoder
from gateway.audio.formats import AudioFormat
from gateway.audio.frames import PCM_LAYOUT, PCM_SAMPLE_FORMAT, frame_to_pcm, pcm_to_frame
from gateway.audio.passthrough import WAV_STREAM_HEADER
from gateway.audio.pcm import BYTES_PER_FRAME, SampleAligner
from gateway.types.codec import SAMPLE_RATE

# The rates every format can carry (MPEG audio's set); Opus codes only five of them.
SAMPLE_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def supported_sample_rates(fmt: AudioFormat) -> tuple[int, ...]:
    return _OPUS_RATES if fmt is AudioFormat.OPUS else SAMPLE_RATES


def wav_header_at(rate: int) -> bytes:
    """The streaming WAV header with ``rate`` for its sample and byte rates."""
    header = bytearray(WAV_STREAM_HEADER)
    struct.pack_into("<II", header, 24, rate, rate * BYTES_PER_FRAME)
    return bytes(header)


class ResampledPcmEncoder:
    """Worker PCM -> PCM at ``rate`` (behind one WAV header when ``wav``), as it arrives."""

    def __init__(self, rate: int, wav: bool) -> None:
        self._align = SampleAligner().align
        self._resampler: av.AudioResampler | None = av.AudioResampler(
            format=PCM_SAMPLE_FORMAT, layout=PCM_LAYOUT, rate=rate
        )
        self._header = wav_header_at(rate) if wav else b""
        self._samples_in = 0

    def encode(self, pcm: bytes) -> bytes:
        resampler = self._require_open()
        whole = self._align(pcm)
        if not whole:
            return self._take_header()
        frame = pcm_to_frame(whole, pts=self._samples_in)
        self._samples_in += len(whole) // BYTES_PER_FRAME
        return self._take_header() + b"".join(frame_to_pcm(out) for out in resampler.resample(frame))

    def finish(self) -> bytes:
        resampler = self._require_open()
        try:
            return self._take_header() + b"".join(frame_to_pcm(out) for out in resampler.resample(None))
        finally:
            self.close()

    def close(self) -> None:
        self._resampler = None  # PyAV frees the resampler's graph with its last reference

    def _take_header(self) -> bytes:
        header, self._header = self._header, b""
        return header

    def _require_open(self) -> av.AudioResampler:
        if self._resampler is None:
            raise EncoderClosedError("the resampler was finished or closed")
        return self._resampler


def resampled_encoder(fmt: AudioFormat, rate: int) -> StreamEncoder:
    """An encoder from worker PCM to ``fmt`` at ``rate`` Hz (``rate`` != the workers' rate)."""
    if rate == SAMPLE_RATE:
        raise ValueError("the workers' own rate needs no resampling")
    if rate not in supported_sample_rates(fmt):
        raise ValueError(f"sample_rate {rate} is not available for {fmt.value}")
    if fmt in CODEC_PROFILES:
        return CodecStreamEncoder(CODEC_PROFILES[fmt], sample_rate=rate)
    return ResampledPcmEncoder(rate, wav=fmt is AudioFormat.WAV)
