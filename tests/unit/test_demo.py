"""``higgs-gateway demo``: the playground is on and logs are readable on a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import demo
from gateway.config import load_config
from gateway.demo import build_parser, demo_config, playground_link


def test_the_demo_serves_the_playground_and_picks_log_lines_by_terminal(tmp_path: Path) -> None:
    config = load_config(None, demo_config(build_parser().parse_args(["--data-dir", str(tmp_path)])))
    assert config.server.playground is True
    assert config.logging.format == "auto"


def test_log_format_can_be_chosen(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--data-dir", str(tmp_path), "--log-format", "json"])
    assert load_config(None, demo_config(args)).logging.format == "json"


def test_the_demo_is_ready_only_once_every_pool_is_warm(tmp_path: Path) -> None:
    both = load_config(None, demo_config(build_parser().parse_args(["--data-dir", str(tmp_path)])))
    assert both.server.ready_requires == "every_pool"
    # A pool left empty on purpose would otherwise never let the demo be ready.
    one = build_parser().parse_args(["--data-dir", str(tmp_path), "--high-throughput-workers", "0"])
    assert load_config(None, demo_config(one)).server.ready_requires == "any_pool"


def test_compare_may_pin_each_side_to_its_pool(tmp_path: Path) -> None:
    # On an idle demo routing by class sends `latency` and `throughput` alike to low-latency.
    config = load_config(None, demo_config(build_parser().parse_args(["--data-dir", str(tmp_path)])))
    assert config.routing.allow_pool_pin is True
    assert load_config(None, {}).routing.allow_pool_pin is False  # never outside the demo unless asked


def test_the_printed_link_hands_the_page_its_admin_token() -> None:
    assert playground_link("http://127.0.0.1:8000", "tok") == "http://127.0.0.1:8000/playground#admin=tok"
    assert playground_link("http://127.0.0.1:8000", None) == "http://127.0.0.1:8000/playground"


def test_without_the_emulator_extra_the_demo_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert demo.speech_note() == ""  # the test extra installs it
    monkeypatch.setattr(demo.importlib.util, "find_spec", lambda name: None)
    assert "pip install 'higgs-gateway[emulator]'" in demo.speech_note()
