"""Security, safe defaults: no API keys on an address beyond loopback is refused at
start-up (and by ``serve --check``) unless ``auth.allow_anonymous: true`` says it is meant;
loopback without keys (the demo, a laptop) starts as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.config import GatewayConfig
from gateway.security.auth import hash_key
from gateway.security.exposure import anonymous_exposure, is_loopback, refuse_anonymous_exposure
from gateway.serve import main as serve_main
from gateway.serve import run


def config(host: str, **auth: object) -> GatewayConfig:
    return GatewayConfig.model_validate({"server": {"host": host}, "auth": auth})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST."])
def test_loopback_without_keys_is_fine(host: str) -> None:
    assert is_loopback(host)
    assert anonymous_exposure(config(host)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "gateway.internal"])
def test_beyond_loopback_without_keys_is_refused_naming_the_setting(host: str) -> None:
    refusal = refuse_anonymous_exposure(config(host))
    assert refusal is not None and "auth.allow_anonymous: true" in refusal and "server.host" in refusal


def test_keys_or_an_explicit_choice_lift_the_refusal() -> None:
    assert refuse_anonymous_exposure(config("0.0.0.0", api_key_sha256=[hash_key("k")])) is None
    assert refuse_anonymous_exposure(config("0.0.0.0", keys=[{"name": "a", "sha256": hash_key("k")}])) is None
    assert refuse_anonymous_exposure(config("0.0.0.0", allow_anonymous=True)) is None


def test_serve_refuses_to_start_before_opening_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config("0.0.0.0")) == 2
    err = capsys.readouterr().err
    assert "refusing to start" in err and "auth.allow_anonymous" in err


def write(path: Path, document: dict[str, object]) -> str:
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_serve_check_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused = write(tmp_path / "open.yaml", {"server": {"host": "0.0.0.0"}})
    assert serve_main(["--config", refused, "--check"]) == 1
    assert "error: auth.allow_anonymous" in capsys.readouterr().err
    chosen = write(tmp_path / "chosen.yaml", {"server": {"host": "0.0.0.0"}, "auth": {"allow_anonymous": True}})
    assert serve_main(["--config", chosen, "--check"]) == 0
    assert "warning: auth.allow_anonymous" in capsys.readouterr().err
    local = write(tmp_path / "local.yaml", {"server": {"host": "127.0.0.1"}})
    assert serve_main(["--config", local, "--check"]) == 0
    assert "allow_anonymous" not in capsys.readouterr().err


def test_the_demo_on_every_interface_needs_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.demo import build_parser, demo_config
    from gateway.demo import main as demo_main

    assert demo_main(["--host", "0.0.0.0", "--data-dir", str(tmp_path)]) == 2
    assert "--allow-anonymous" in build_parser().format_help() and "auth.allow_anonymous" in capsys.readouterr().err
    chosen = demo_config(build_parser().parse_args(["--host", "0.0.0.0", "--allow-anonymous"]))
    assert refuse_anonymous_exposure(GatewayConfig.model_validate({k: v for k, v in chosen.items() if k != "pools"})) is None
    local = demo_config(build_parser().parse_args([]))
    assert refuse_anonymous_exposure(GatewayConfig.model_validate({k: v for k, v in local.items() if k != "pools"})) is None
