"""The gateway's own share of the time to first audio, per format and speed, learned.

From the moment the worker's first chunk is in hand to the first encoded byte handed to
the client: the encoder's (and tempo filter's) set-up and its first call. Since the first
chunk yields audio in every format and speed (``codec.EarlyStart``, ``tempo``), this is
CPU time only, a few milliseconds; it still differs by format (LAME's start is the
largest), so the predicted TTFP and the client's TTFP budget count it rather than assume 0.

Kept per format, per number of ``atempo`` stages (0 at speed 1) and apart for a request's
``sample_rate`` other than the workers' (``resample``): a bounded key set, whatever speeds
and rates clients send. Such a stream has no early start in mp3, aac and flac and waits for
the worker's second chunk, so its mean is learned on its own and never moves the mean of the
same format at the workers' rate. Each request's measurement moves an exponential average.
"""

from __future__ import annotations

from gateway.audio.formats import AudioFormat
from gateway.audio.tempo import atempo_factors
from gateway.types.codec import SAMPLE_RATE

# Before any request was measured: what one core of a busy 2-core machine took
# (``higgs-gateway bench encoder-cost`` reports the same path's CPU cost).
PRIOR_S = {
    AudioFormat.PCM: 0.0,
    AudioFormat.WAV: 0.0,
    AudioFormat.FLAC: 0.001,
    AudioFormat.OPUS: 0.0015,
    AudioFormat.AAC: 0.002,
    AudioFormat.MP3: 0.003,
}
STRETCH_PRIOR_S = 0.0015  # per atempo stage: a filter graph built and flushed for the first chunk
# One stalled event loop (a GC pause, a burst of work) says nothing about the encoder.
_MAX_OBSERVATION_S = 0.25


def _stages(speed: float) -> int:
    return 0 if speed == 1.0 else len(atempo_factors(speed))


def _resampled(sample_rate: int | None) -> bool:
    return sample_rate is not None and sample_rate != SAMPLE_RATE


def _prior(fmt: AudioFormat, stages: int) -> float:
    return PRIOR_S[fmt] + stages * STRETCH_PRIOR_S


class FirstAudioDelays:
    """Predicts and learns the gateway's delay to the first audio byte of a request."""

    def __init__(self, weight: float = 0.1) -> None:
        self._weight = weight  # of each new measurement in the average
        self._means: dict[tuple[AudioFormat, int, bool], float] = {}

    def predict(self, fmt: AudioFormat, speed: float, sample_rate: int | None = None) -> float:
        """Seconds from the worker's first chunk to the first encoded byte."""
        stages = _stages(speed)
        mean = self._means.get((fmt, stages, _resampled(sample_rate)))
        return mean if mean is not None else _prior(fmt, stages)

    def observe(self, fmt: AudioFormat, speed: float, seconds: float, sample_rate: int | None = None) -> None:
        """One request's measurement. The average starts at the prior, so the process's
        first, colder request (lazy codec tables) moves it only by ``weight``."""
        seconds = min(max(seconds, 0.0), _MAX_OBSERVATION_S)
        key = (fmt, _stages(speed), _resampled(sample_rate))
        mean = self._means.get(key, _prior(fmt, key[1]))
        self._means[key] = mean + self._weight * (seconds - mean)

    def snapshot(self) -> dict[str, float]:
        """Learned means in ms, for the admin view and tests: ``"mp3"``, ``"mp3@x1"`` (1 stage),
        ``"mp3/resampled"`` (another ``sample_rate``)..."""
        return {
            f"{fmt.value}{f'@x{stages}' if stages else ''}{'/resampled' if resampled else ''}": round(mean * 1000, 3)
            for (fmt, stages, resampled), mean in self._means.items()
        }
