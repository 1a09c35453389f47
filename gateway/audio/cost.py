"""CPU cost of the encoders per second of audio: ``higgs-gateway bench encoder-cost``.

A measurement for capacity planning, not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import time

from gateway.audio.factory import open_encoder
from gateway.audio.formats import AudioFormat
from gateway.types.codec import BYTES_PER_FRAME, BYTES_PER_SECOND, SAMPLE_RATE

_FIRST_CHUNK_BYTES = BYTES_PER_FRAME  # the worker's pattern: one 40 ms frame, then 1 s chunks


def speech_like_pcm(seconds: float) -> bytes:
    """A gliding, amplitude-modulated tone: busier than silence, cheap to make without numpy."""
    samples = bytearray()
    for n in range(int(seconds * SAMPLE_RATE)):
        t = n / SAMPLE_RATE
        envelope = 0.5 + 0.5 * math.sin(2 * math.pi * 3 * t)
        value = int(12_000 * envelope * math.sin(2 * math.pi * (180 + 60 * math.sin(t)) * t))
        samples += value.to_bytes(2, "little", signed=True)
    return bytes(samples)


def worker_chunks(pcm: bytes) -> list[bytes]:
    chunks = [pcm[:_FIRST_CHUNK_BYTES]]
    chunks += [pcm[i : i + BYTES_PER_SECOND] for i in range(_FIRST_CHUNK_BYTES, len(pcm), BYTES_PER_SECOND)]
    return chunks


def encode_cpu_ms_per_audio_second(fmt: AudioFormat, speed: float, pcm: bytes, repeats: int) -> float:
    """Best-of-``repeats`` process CPU time to encode ``pcm``, in ms per second of input audio."""
    chunks = worker_chunks(pcm)
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        encoder = open_encoder(fmt, speed)
        try:
            for chunk in chunks:
                encoder.encode(chunk)
            encoder.finish()
        finally:
            encoder.close()
        best = min(best, time.process_time() - started)
    return 1000 * best / (len(pcm) / BYTES_PER_SECOND)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench encoder-cost", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per run")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    args = parser.parse_args(argv)
    pcm = speech_like_pcm(args.seconds)
    print(f"{'format':<6} {'speed 1':>10} {'speed 1.5':>10}   (CPU ms per audio second)")
    for fmt in AudioFormat:
        costs = [encode_cpu_ms_per_audio_second(fmt, s, pcm, args.repeats) for s in (1.0, 1.5)]
        print(f"{fmt.value:<6} {costs[0]:>10.3f} {costs[1]:>10.3f}")
    return 0
