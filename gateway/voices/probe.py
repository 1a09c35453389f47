"""Is an upload really audio, and how long is it?

The container is chosen from the file's own magic bytes (never the client's filename or
content type) and only that demuxer is used: FFmpeg is not asked to guess among all of
its parsers for untrusted bytes. The audio is then decoded, not just its header read, so
a valid header over garbage, a truncated file or a header that lies about its length is
caught here instead of on every speech request that names the voice.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av

from gateway.voices.errors import VoiceError


@dataclass(frozen=True, slots=True)
class AudioFormat:
    name: str
    demuxer: str  # PyAV/FFmpeg format name, forced when opening
    ext: str  # file extension the store and workers use
    mime: str  # one of the MIME types vllm-omni accepts for uploaded voices


WAV = AudioFormat("wav", "wav", "wav", "audio/wav")
MP3 = AudioFormat("mp3", "mp3", "mp3", "audio/mpeg")
FLAC = AudioFormat("flac", "flac", "flac", "audio/flac")
OGG = AudioFormat("ogg", "ogg", "ogg", "audio/ogg")
WEBM = AudioFormat("webm", "matroska,webm", "webm", "audio/webm")
MP4 = AudioFormat("mp4", "mov,mp4,m4a,3gp,3g2,mj2", "m4a", "audio/mp4")
AAC = AudioFormat("aac", "aac", "aac", "audio/aac")

FORMATS: tuple[AudioFormat, ...] = (WAV, MP3, FLAC, OGG, WEBM, MP4, AAC)
FORMATS_BY_EXT = {f.ext: f for f in FORMATS}
SUPPORTED_NAMES = ", ".join(f.name for f in FORMATS)


def sniff_format(data: bytes) -> AudioFormat | None:
    """The container named by the first bytes, or None when they are not audio we accept."""
    head = data[:12]
    if len(head) < 4:
        return None
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return WAV
    if head[:4] == b"fLaC":
        return FLAC
    if head[:4] == b"OggS":
        return OGG
    if head[:4] == b"\x1a\x45\xdf\xa3":  # EBML: WebM/Matroska (browser recordings)
        return WEBM
    if head[4:8] == b"ftyp":
        return MP4
    if head[:3] == b"ID3":
        return MP3
    if head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # Both MPEG audio and ADTS start with a sync word; ADTS has layer bits 00.
        return AAC if head[1] & 0x06 == 0 else MP3
    return None


@dataclass(frozen=True, slots=True)
class AudioInfo:
    format: AudioFormat
    duration_s: float
    sample_rate: int
    channels: int
    codec: str


def _invalid(message: str) -> VoiceError:
    return VoiceError(message, code="invalid_audio", param="audio_sample")


def probe_audio(data: bytes, stop_after_s: float | None = None) -> AudioInfo:
    """Decode ``data`` and measure it; raise a 400 ``VoiceError`` if it is not audio.

    Decoding stops once ``stop_after_s`` is exceeded: a 10 MB FLAC can hold minutes of
    audio and there is no need to decode past the longest duration accepted.
    """
    fmt = sniff_format(data)
    if fmt is None:
        raise _invalid(f"audio_sample is not a recognised audio file (accepted: {SUPPORTED_NAMES}).")
    try:
        with av.open(io.BytesIO(data), mode="r", format=fmt.demuxer) as container:
            if not container.streams.audio:
                raise _invalid(f"audio_sample looks like {fmt.name} but contains no audio stream.")
            stream = container.streams.audio[0]
            samples = 0
            rate = 0
            for frame in container.decode(stream):
                rate = frame.sample_rate or stream.rate or rate
                samples += frame.samples
                if stop_after_s is not None and rate and samples / rate > stop_after_s:
                    break
            channels = stream.codec_context.channels
            codec = stream.codec_context.name
    except VoiceError:
        raise
    except Exception as exc:  # any parser failure on untrusted bytes means "not usable audio"
        raise _invalid(f"audio_sample could not be decoded as {fmt.name}: {exc}") from exc
    if samples == 0 or not rate:
        raise _invalid(f"audio_sample ({fmt.name}) contains no decodable audio.")
    return AudioInfo(fmt, samples / rate, int(rate), int(channels), codec)


def validate_reference_audio(data: bytes, min_s: float, max_s: float) -> AudioInfo:
    """Probe ``data`` and hold it to the reference-audio duration Higgs clones from."""
    info = probe_audio(data, stop_after_s=max_s)
    if info.duration_s > max_s:
        raise _invalid(
            f"audio_sample is longer than {max_s:g} s; trim it to {min_s:g}-{max_s:g} s of clear speech."
        )
    if info.duration_s < min_s:
        raise _invalid(
            f"audio_sample is {info.duration_s:.2f} s long; "
            f"reference audio must be {min_s:g}-{max_s:g} s of clear speech."
        )
    return info
