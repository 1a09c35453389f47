"""The run-time threshold store: validation, atomic persistence, restart, corrupt files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.config import RoutingConfig, RoutingThresholds
from gateway.routing.thresholds import ROUTING_STATE_FILE, ThresholdStore, ThresholdUpdateError, effective_thresholds
from tests.unit.routing.fakes import ht, ll, view

INITIAL = RoutingConfig(thresholds=RoutingThresholds(balanced_hysteresis=3))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / ROUTING_STATE_FILE


def test_starts_from_initial_without_a_file(path: Path) -> None:
    store = ThresholdStore(path, INITIAL)
    assert store.current() == INITIAL
    assert store.thresholds() is INITIAL.thresholds
    assert not path.exists()


def test_update_applies_persists_and_survives_restart(path: Path) -> None:
    store = ThresholdStore(path, INITIAL)
    updated = store.update({"policy": "least_loaded", "thresholds": {"balanced_threshold": 12}})
    assert updated.policy == "least_loaded"
    assert updated.thresholds.balanced_threshold == 12
    assert updated.thresholds.balanced_hysteresis == 3  # untouched keys keep their value
    assert store.current() == updated
    store.update({"thresholds": {"reserve_for_latency": 0}})  # patches accumulate
    restarted = ThresholdStore(path, INITIAL)
    assert restarted.current() == store.current()
    assert restarted.overrides() == {
        "policy": "least_loaded",
        "thresholds": {"balanced_threshold": 12, "reserve_for_latency": 0},
    }


def test_overrides_sit_on_top_of_a_changed_config_file(path: Path) -> None:
    ThresholdStore(path, INITIAL).update({"thresholds": {"balanced_threshold": 12}})
    edited = RoutingConfig(thresholds=RoutingThresholds(balanced_hysteresis=5))
    restarted = ThresholdStore(path, edited)
    assert restarted.current().thresholds.balanced_threshold == 12
    assert restarted.current().thresholds.balanced_hysteresis == 5


def test_null_restores_a_none_default(path: Path) -> None:
    store = ThresholdStore(path, RoutingConfig(thresholds=RoutingThresholds(balanced_threshold=8)))
    assert store.update({"thresholds": {"balanced_threshold": None}}).thresholds.balanced_threshold is None


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"thresholds": {"balanced_hysteresis": -1}}, "thresholds.balanced_hysteresis"),
        ({"thresholds": {"ttfp_budget_queue_fraction": 1.5}}, "thresholds.ttfp_budget_queue_fraction"),
        ({"thresholds": {"balanced_treshold": 4}}, "thresholds.balanced_treshold"),
        ({"thresholds": {"reserve_for_latency": "many"}}, "thresholds.reserve_for_latency"),
        ({"policy": "fastest"}, "policy"),
        ({"thresholds": None}, "thresholds"),
        ({"admission": {}}, "admission"),
        (["not", "a", "mapping"], "<root>"),
    ],
)
def test_invalid_patch_changes_nothing(path: Path, patch: Any, key: str) -> None:
    store = ThresholdStore(path, INITIAL)
    store.update({"thresholds": {"balanced_threshold": 6}})
    before, before_file = store.current(), path.read_text()
    with pytest.raises(ThresholdUpdateError) as error:
        store.update(patch)
    assert isinstance(error.value, ValueError)
    assert key in [k for k, _ in error.value.errors]
    assert key in str(error.value)
    assert store.current() == before
    assert path.read_text() == before_file


def test_persisting_is_atomic_and_leaves_no_temp_files(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ThresholdStore(path, INITIAL)
    store.update({"thresholds": {"balanced_threshold": 6}})
    before_file = path.read_text()
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        store.update({"thresholds": {"balanced_threshold": 7}})
    assert synced, "the temp file is fsynced before it replaces the old one"
    assert store.current().thresholds.balanced_threshold == 6  # memory unchanged
    assert path.read_text() == before_file  # old file intact
    assert sorted(p.name for p in path.parent.iterdir()) == [ROUTING_STATE_FILE]  # temp removed


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        json.dumps(["a list"]),
        json.dumps({"version": 1}),
        json.dumps({"version": 1, "overrides": "nope"}),
        json.dumps({"version": 1, "overrides": {"thresholds": {"balanced_hysteresis": -4}}}),
    ],
)
def test_corrupt_file_is_logged_and_ignored(path: Path, content: str, caplog: pytest.LogCaptureFixture) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with caplog.at_level(logging.ERROR, logger="gateway.routing.thresholds"):
        store = ThresholdStore(path, INITIAL)
    assert store.current() == INITIAL
    assert "ignoring unusable routing overrides" in caplog.text
    store.update({"thresholds": {"balanced_threshold": 9}})  # and the next update replaces it
    assert ThresholdStore(path, INITIAL).current().thresholds.balanced_threshold == 9


def test_reset_returns_to_initial(path: Path) -> None:
    store = ThresholdStore(path, INITIAL)
    store.update({"policy": "round_robin"})
    assert store.reset() == INITIAL
    assert ThresholdStore(path, INITIAL).current() == INITIAL


def test_in_data_dir(tmp_path: Path) -> None:
    assert ThresholdStore.in_data_dir(tmp_path, INITIAL).path == tmp_path / ROUTING_STATE_FILE


@pytest.mark.parametrize(
    ("knobs", "expect_threshold"),
    [({}, 10.0), ({"balanced_threshold": 3}, 3.0)],
)
def test_effective_thresholds_resolve_defaults(knobs: dict, expect_threshold: float) -> None:
    fleet = view(ll("ll-a", slots=4), ll("ll-b", slots=6), ll("ll-c", routable=False), ht("ht-a"))
    values = effective_thresholds(RoutingThresholds(**knobs), fleet)
    assert values == {
        "balanced_rtf_ceiling": 0.9,
        "balanced_threshold": expect_threshold,
        "balanced_hysteresis": 2.0,
        "reserve_for_latency": 3.0,
        "adaptive_latency_reserve": 1.0,  # a switch, shown as 1 / 0
        "latency_queue_budget_ms": 150.0,
        "ttfp_budget_queue_fraction": 0.5,
        "voice_affinity": 1.0,
        "voice_affinity_encode_ms_per_second": 6.0,
        "voice_affinity_bonus_ms": 40.0,
    }
