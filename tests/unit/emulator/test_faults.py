from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.emulator.faults import FaultUpdate, Faults


def test_partial_updates_touch_only_the_fields_sent() -> None:
    faults = Faults()
    faults.apply(FaultUpdate(fail_next=2, hang_seconds=1.5))
    faults.apply(FaultUpdate(unhealthy=True))
    assert faults.as_dict() == {"fail_next": 2, "cut_after_chunks": None, "error_after_chunks": None, "hang_seconds": 1.5, "unhealthy": True, "engine_dead": False, "leak_load": False}
    faults.apply(FaultUpdate.model_validate({"hang_seconds": None}))
    assert faults.hang_seconds is None and faults.fail_next == 2


def test_fail_next_counts_down() -> None:
    faults = Faults(fail_next=2)
    assert [faults.take_failure() for _ in range(3)] == [True, True, False]


def test_clear_resets_then_applies_the_rest() -> None:
    faults = Faults(fail_next=3, cut_after_chunks=1, unhealthy=True)
    faults.apply(FaultUpdate(clear=True, error_after_chunks=2))
    assert faults.as_dict() == {"fail_next": 0, "cut_after_chunks": None, "error_after_chunks": 2, "hang_seconds": None, "unhealthy": False, "engine_dead": False, "leak_load": False}


@pytest.mark.parametrize("body", [{"fail_next": -1}, {"cut_after_chunks": -2}, {"boom": 1}, {"hang_seconds": -1}])
def test_bad_updates_are_rejected(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FaultUpdate.model_validate(body)
