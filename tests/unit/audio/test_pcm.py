from gateway.audio import SampleAligner, pcm_bytes_for_seconds, pcm_duration_seconds


def test_duration_of_worker_pcm() -> None:
    assert pcm_duration_seconds(48_000) == 1.0
    assert pcm_bytes_for_seconds(0.04) == 1_920
    assert pcm_bytes_for_seconds(1.00001) % 2 == 0


def test_aligner_carries_a_split_sample_and_keeps_every_byte() -> None:
    aligner = SampleAligner()
    data = bytes(range(200))
    out = []
    for size in (1, 3, 2, 7, 187):
        piece = aligner.align(data[:size])
        data = data[size:]
        assert len(piece) % 2 == 0
        out.append(piece)
    assert b"".join(out) == bytes(range(200))
    assert aligner.pending == 0


def test_aligned_chunks_pass_through_without_copy() -> None:
    chunk = b"\x00\x01" * 100
    assert SampleAligner().align(chunk) is chunk
