"""Turn any accepted upload into the clip every worker can read: 24 kHz mono 16-bit WAV.

People have browser recordings (WebM/Opus), phone memos (M4A/AAC, MP4) and the usual
WAV/FLAC/OGG/MP3. A vllm-omni 0.30.0 worker decodes voice samples with soundfile, which
has no AAC, MP4 or WebM reader, so forwarding the original would register the voice in
the gateway and then fail on every worker. PyAV decodes everything ``probe`` accepts;
the result is resampled to the model's 24 kHz mono, which every soundfile reads.
"""

from __future__ import annotations

import io
import wave

import av
import numpy as np

from gateway.types.codec import SAMPLE_RATE
from gateway.voices.errors import VoiceError
from gateway.voices.probe import AudioFormat

WAV_MIME = "audio/wav"
WAV_EXT = "wav"


def normalised_wav(data: bytes, fmt: AudioFormat, max_s: float) -> bytes:
    """Decode ``data`` (already probed as ``fmt``) to a 24 kHz mono s16 WAV of at most ``max_s``."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    limit = int(max_s * SAMPLE_RATE) + SAMPLE_RATE  # never decode far past the longest clip kept
    parts: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r", format=fmt.demuxer) as container:
            stream = container.streams.audio[0]
            for frame in container.decode(stream):
                frame.pts = None  # the resampler must not try to fill timestamp gaps
                for out in resampler.resample(frame):
                    total += _append(parts, out)
                if total > limit:
                    break
            for out in resampler.resample(None):
                total += _append(parts, out)
    except Exception as exc:  # probe decoded it already; a failure here is still the file's fault
        raise VoiceError(
            f"audio_sample could not be converted to WAV: {exc}", code="invalid_audio", param="audio_sample"
        ) from exc
    pcm = np.concatenate(parts) if parts else np.zeros(0, dtype="<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(pcm.astype("<i2").tobytes())
    return buffer.getvalue()


def _append(parts: list[np.ndarray], frame: av.AudioFrame) -> int:
    samples = frame.to_ndarray().reshape(-1)
    parts.append(samples)
    return int(samples.size)
