from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.emulator.faults import FaultUpdate, Faults


def test_partial_updates_touch_only_the_fields_sent() -> None:
    faults = Faults()
    faults.apply(FaultUpdate(fail_next=2, hang_seconds=1.5))
    faults.apply(FaultUpdate(unhealthy=True))
    assert faults.as_dict() == {"fail_next": 2, "cut_after_chunks": None, "error_after_chunks": None, "hang_seconds": 1.5, "unhealthy": True, "engine_dead": False, "leak_load": False, "noisy_from": None, "silent_from": None, "clipped_from": None}
    faults.apply(FaultUpdate.model_validate({"hang_seconds": None}))
    assert faults.hang_seconds is None and faults.fail_next == 2


def test_fail_next_counts_down() -> None:
    faults = Faults(fail_next=2)
    assert [faults.take_failure() for _ in range(3)] == [True, True, False]


def test_clear_resets_then_applies_the_rest() -> None:
    faults = Faults(fail_next=3, cut_after_chunks=1, unhealthy=True)
    faults.apply(FaultUpdate(clear=True, error_after_chunks=2))
    assert faults.as_dict() == {"fail_next": 0, "cut_after_chunks": None, "error_after_chunks": 2, "hang_seconds": None, "unhealthy": False, "engine_dead": False, "leak_load": False, "noisy_from": None, "silent_from": None, "clipped_from": None}


@pytest.mark.parametrize(
    "body", [{"fail_next": -1}, {"cut_after_chunks": -2}, {"boom": 1}, {"hang_seconds": -1}, {"noisy_from": 0}, {"clipped_from": -1}]
)
def test_bad_updates_are_rejected(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FaultUpdate.model_validate(body)


def test_audio_faults_act_from_their_concurrency_and_clear_switches_them_off() -> None:
    faults = Faults()
    pcm = (b"\x10\x02" * 960)  # one codec frame at a speaking level
    faults.apply(FaultUpdate(noisy_from=8, clipped_from=16))
    assert faults.degrade(pcm, 7, 0) == pcm  # below both: untouched, not even copied differently
    noisy = faults.degrade(pcm, 8, 0)
    assert len(noisy) == len(pcm) and noisy != pcm and noisy == faults.degrade(pcm, 8, 0)  # deterministic
    assert noisy != faults.degrade(pcm, 8, 960)  # another chunk, other noise
    clipped = faults.degrade(pcm, 16, 0)
    assert clipped.count(b"\xff\x7f") + clipped.count(b"\x00\x80") > 100  # driven to full scale
    faults.apply(FaultUpdate(silent_from=1))
    assert faults.degrade(pcm, 1, 0) == bytes(len(pcm))  # silence wins
    faults.apply(FaultUpdate.model_validate({"silent_from": None}))
    assert faults.degrade(pcm, 1, 0) == pcm
    faults.apply(FaultUpdate(clear=True))
    assert not faults.degrades_audio and faults.degrade(pcm, 64, 0) == pcm
