"""A ``Worker`` changes only through its own methods, which keep the fields that belong
together in step (a state and when it began, an ejection and its time, a restart and the
reports it voids)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gateway
from gateway.pools.worker import LoadSource, Worker
from gateway.types import PoolName, WorkerState
from gateway.types.labels import EjectionReason

PACKAGE = Path(gateway.__file__).parent
WORKER_MODULE = PACKAGE / "pools" / "worker.py"
PUBLIC_FIELDS = sorted(name for name, value in vars(Worker).items() if isinstance(value, property))


def worker(state: WorkerState = WorkerState.READY) -> Worker:
    return Worker("ll-0", PoolName.LOW_LATENCY, "http://ll-0", 4, state=state)


@pytest.mark.parametrize("field", PUBLIC_FIELDS)
def test_no_field_can_be_assigned_from_outside(field: str) -> None:
    w = worker()
    with pytest.raises(AttributeError):
        setattr(w, field, getattr(w, field))


def test_no_new_attribute_can_be_added() -> None:
    with pytest.raises(AttributeError):
        w = worker()
        w.note = "anything"  # type: ignore[attr-defined]


def _private_writes(path: Path) -> list[str]:
    """Writes to a Worker's private slots on anything but ``self`` (``w._state = ...``,
    ``object.__setattr__(w, "_state", ...)``): the way around the read-only fields."""
    slots = set(Worker.__slots__)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for item in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(item, ast.Attribute) and item.attr in slots:
                    if not (isinstance(item.value, ast.Name) and item.value.id == "self"):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(item)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "object.__setattr__") and len(node.args) > 1:
            name = node.args[1]
            if not isinstance(name, ast.Constant) or name.value in slots:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_writes_a_workers_private_fields() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != WORKER_MODULE for hit in _private_writes(path)]
    assert found == []


def test_a_state_change_keeps_its_time_and_an_ejection_its_own() -> None:
    w = worker(WorkerState.STARTING)
    assert w.set_state(WorkerState.READY, 5.0, "prepared") and w.state_since == 5.0 and w.ejected_at is None
    assert not w.set_state(WorkerState.READY, 6.0)  # already there: nothing moves
    assert w.state_since == 5.0
    assert w.set_state(WorkerState.EJECTED, 7.0) and (w.state_since, w.ejected_at) == (7.0, 7.0)
    w.wait_half_open_again(9.0)
    assert (w.state_since, w.ejected_at) == (7.0, 9.0)


def test_eject_takes_only_a_routable_worker_out_but_keeps_the_reason() -> None:
    w = worker(WorkerState.STARTING)
    assert not w.eject(EjectionReason.ENGINE_DEAD, "500", 1.0)
    assert w.state is WorkerState.STARTING and w.last_error == "engine_dead: 500"
    assert w.set_state(WorkerState.READY, 2.0)
    assert w.eject(EjectionReason.ENGINE_DEAD, "500", 3.0) and w.state is WorkerState.EJECTED and w.ejected_at == 3.0


def test_failures_in_a_row_eject_at_the_threshold_and_readiness_forgets_them() -> None:
    w = worker()
    assert not w.count_failure(EjectionReason.HEALTH_PROBE, 3, 1.0)
    assert not w.count_failure(EjectionReason.HEALTH_PROBE, 3, 2.0)
    w.mark_failed_after_arrival()
    assert w.count_failure(EjectionReason.HEALTH_PROBE, 3, 3.0) and w.state is WorkerState.EJECTED
    assert w.mark_ready(4.0, "prepared") and w.routable
    assert w.consecutive_failures == 0 and not w.failed_after_arrival


def test_a_restart_voids_what_the_old_process_said() -> None:
    w = worker()
    w.answered_probe()
    w.record_report(3, 1.0)
    assert w.record_start_time(100.0) is None and w.record_start_time(100.0) == 100.0
    assert w.process_restarting(2.0)
    assert (w.state, w.restarts, w.answered, w.reported_load, w.process_start_time) == (
        WorkerState.STARTING, 1, False, None, None,
    )  # fmt: skip
    assert not w.process_restarting(3.0)  # already restarting: not counted twice
    assert w.restarts == 1

    noticed = worker()
    noticed.answered_probe()
    noticed.record_report(3, 1.0)
    noticed.count_failure(EjectionReason.HEALTH_PROBE, 3, 1.0)
    noticed.restarted_behind_address(2.0, "start_time_changed")
    assert (noticed.state, noticed.restarts, noticed.reported_load, noticed.consecutive_failures) == (
        WorkerState.STARTING, 1, None, 0,
    )  # fmt: skip
    assert noticed.answered  # it answers already: its voices are replayed at once


def test_leases_drains_and_the_fleet_view() -> None:
    w = worker()
    w.lease_taken()
    w.lease_taken()
    w.lease_returned()
    assert w.inflight == 1 and w.fleet_load() is None
    w.apply_fleet_leases(2)
    assert w.fleet_load() == 3
    w.set_drained(True)
    assert not w.routable
    w.set_drained(False)
    w.set_retiring(True)
    assert not w.routable
    w.read_load_from(LoadSource.METRICS)
    assert w.describe(0.0, 1.0)["load_source"] == "metrics"


def test_quality_notes_wait_for_a_record() -> None:
    w = worker()
    w.note_quality("ejection", {"detail": "noisy"})
    assert w.quality is None
    w.record_quality({"window": 1})
    w.note_quality("ejection", {"detail": "noisy"})
    assert w.quality == {"window": 1, "ejection": {"detail": "noisy"}}
