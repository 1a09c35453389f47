"""The workers' audio, as every part of the gateway counts it.

Higgs-Audio V3 decodes one 40 ms codec frame per Stage 0 step for each running stream;
Stage 1 turns frames into 24 kHz mono signed 16-bit little-endian PCM. A worker streams a
one-frame first chunk, then chunks of 25 frames (one second of audio).
"""

from __future__ import annotations

from typing import Final

SAMPLE_RATE: Final = 24_000
CHANNELS: Final = 1
SAMPLE_WIDTH: Final = 2  # bytes per sample
BYTES_PER_SECOND: Final = SAMPLE_RATE * CHANNELS * SAMPLE_WIDTH

FRAMES_PER_SECOND: Final = 25  # codec frames per second of audio; one per decode step
FRAME_SECONDS: Final = 1.0 / FRAMES_PER_SECOND
SAMPLES_PER_FRAME: Final = SAMPLE_RATE // FRAMES_PER_SECOND
BYTES_PER_FRAME: Final = BYTES_PER_SECOND // FRAMES_PER_SECOND  # 1920

# The model decodes 8 codebooks with a delay pattern: the first 8 decode steps of a request
# (its first 8 tokens) make its first audio frame, so a max_new_tokens below 8 gets no audio
# at all, only an empty 200 (vllm-omni 0.30.0:
# model_executor/stage_input_processors/higgs_audio_v3.py, talker2code2wav_async_chunk).
MIN_AUDIO_TOKENS: Final = 8
