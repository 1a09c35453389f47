"""Worker PCM <-> PyAV audio frames (the only place that knows the PCM's layout in PyAV terms)."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from gateway.audio.pcm import BYTES_PER_FRAME
from gateway.types.codec import CHANNELS, SAMPLE_RATE

PCM_SAMPLE_FORMAT = "s16"  # packed signed 16-bit, native order; PyAV runs on little-endian hosts
PCM_LAYOUT = "mono" if CHANNELS == 1 else "stereo"
PCM_TIME_BASE = Fraction(1, SAMPLE_RATE)
_PCM_DTYPE = np.dtype("<i2")


def pcm_to_frame(pcm: bytes | memoryview, pts: int) -> av.AudioFrame:
    """An audio frame holding whole-sample ``pcm``, stamped at sample offset ``pts``."""
    samples = np.frombuffer(pcm, dtype=_PCM_DTYPE).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(samples, format=PCM_SAMPLE_FORMAT, layout=PCM_LAYOUT)
    frame.sample_rate = SAMPLE_RATE
    frame.time_base = PCM_TIME_BASE
    frame.pts = pts
    return frame


def frame_to_pcm(frame: av.AudioFrame) -> memoryview:
    """A view of the frame's PCM bytes (s16 packed); planes are padded, so cut at the sample count."""
    return memoryview(frame.planes[0])[: frame.samples * BYTES_PER_FRAME]
