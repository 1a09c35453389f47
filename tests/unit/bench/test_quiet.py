"""Waiting for a quiet machine is bounded and returns the load it saw."""

from __future__ import annotations

from gateway.bench import arguments


def test_returns_at_once_when_quiet(monkeypatch) -> None:
    monkeypatch.setattr(arguments, "load_average", lambda: 0.2)
    assert arguments.wait_for_quiet(1.0, max_wait_s=60) == 0.2


def test_waits_until_the_load_drops(monkeypatch) -> None:
    loads = iter([3.0, 2.0, 0.5])
    monkeypatch.setattr(arguments, "load_average", lambda: next(loads))
    monkeypatch.setattr(arguments.time, "sleep", lambda s: None)
    assert arguments.wait_for_quiet(1.0, max_wait_s=60) == 0.5


def test_gives_up_after_the_longest_wait(monkeypatch) -> None:
    monkeypatch.setattr(arguments, "load_average", lambda: 5.0)
    assert arguments.wait_for_quiet(1.0, max_wait_s=0) == 5.0
