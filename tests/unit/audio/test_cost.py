from gateway.audio import AudioFormat
from gateway.audio.cost import encode_cpu_ms_per_audio_second, speech_like_pcm, worker_chunks
from gateway.types.codec import BYTES_PER_SECOND


def test_worker_chunk_pattern_covers_the_audio() -> None:
    pcm = speech_like_pcm(2.5)
    chunks = worker_chunks(pcm)
    assert len(chunks[0]) == BYTES_PER_SECOND // 25  # 40 ms first
    assert all(len(chunk) == BYTES_PER_SECOND for chunk in chunks[1:-1])
    assert b"".join(chunks) == pcm


def test_cost_measurement_reports_a_number() -> None:
    cost = encode_cpu_ms_per_audio_second(AudioFormat.FLAC, 1.0, speech_like_pcm(0.2), repeats=1)
    assert cost >= 0.0
