"""``higgs-gateway``: usage errors, ``--version``, help with defaults, ``serve --check`` / ``--print-config``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway import __version__
from gateway.cli import BENCH_TOOLS, COMMANDS
from gateway.cli import main as cli_main
from gateway.demo import build_parser as demo_parser
from gateway.serve import main as serve_main

LL_PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script as a user runs it: real exit status, real streams."""
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60)


def test_no_arguments_is_a_usage_error_on_stderr() -> None:
    result = run_cli()
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: higgs-gateway [-h] [-V] COMMAND ...")
    assert "required: COMMAND" in result.stderr


def test_unknown_command_is_a_usage_error_naming_the_commands() -> None:
    result = run_cli("nonsense")
    assert result.returncode == 2 and result.stdout == ""
    assert "invalid choice: 'nonsense'" in result.stderr and "'serve'" in result.stderr


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"higgs-gateway {__version__}"
    with pytest.raises(SystemExit) as exited:
        cli_main(["--help"])
    assert exited.value.code == 0
    help_text = capsys.readouterr().out
    assert "-V, --version" in help_text
    assert all(name in help_text for name in COMMANDS)


def test_help_lists_every_tool() -> None:
    # One console script: every tool is a command or a `bench` tool, and the top-level help
    # names them all (the bench list without importing the benchmark).
    from gateway.bench.cli import build_parser as bench_parser

    subparsers = next(a for a in bench_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(subparsers.choices) == BENCH_TOOLS
    result = run_cli("--help")
    assert result.returncode == 0
    listed = " ".join(result.stdout.split()).replace("- ", "-")  # argparse wraps long names at hyphens
    assert all(f" {name} " in listed for name in COMMANDS)
    bench_line = listed.split(" bench ", 1)[1].split(" emulator ", 1)[0]
    assert bench_line.endswith(": " + ", ".join(BENCH_TOOLS))
    assert "emulator calibrate" in listed


def test_no_tool_runs_outside_the_console_script() -> None:
    # No module is a `python -m` entry point of its own but the package (``python -m gateway``).
    package = Path(__file__).resolve().parents[2] / "gateway"
    entry_points = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if path.name != "__main__.py" and "__name__ == \"__main__\"" in path.read_text()
    )  # fmt: skip
    assert entry_points == []


@pytest.mark.parametrize("tool", ["decision", "encoder-cost", "soak", "agreement", "held-mix"])
def test_every_bench_tool_has_its_help(tool: str) -> None:
    result = run_cli("bench", tool, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: higgs-gateway bench {tool}")


def test_emulator_calibrate_is_a_command() -> None:
    result = run_cli("emulator", "calibrate", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: higgs-gateway emulator calibrate")


def test_arguments_after_the_command_reach_its_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["serve", "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: higgs-gateway serve")


def test_every_demo_option_has_help_and_help_shows_defaults() -> None:
    parser = demo_parser()
    options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert options and all(action.help for action in options), [a.dest for a in options if not a.help]
    text = parser.format_help()
    assert "(default: 8000)" in text and "(default: 127.0.0.1)" in text and "(default: auto)" in text
    assert "(default: None)" not in text  # options without a default say nothing


def write_config(path: Path, document: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def test_print_config_is_the_effective_config_with_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path / "gateway.yaml",
        {
            "server": {"port": 8100},
            "data_dir": str(tmp_path / "data"),
            "state": {"backend": "redis", "redis_url": "redis://:redis-pass-123@cache:6379/0"},
            "pools": {
                "low_latency": {
                    "profile": LL_PROFILE,
                    "launch": {"gpus": ["0"], "env": {"HF_TOKEN": "hf-secret-456", "VLLM_LOGGING_LEVEL": "INFO"}},
                }
            },
        },
    )
    monkeypatch.setenv("HIGGS_GATEWAY_ADMIN_TOKEN", "admin-secret-789")
    monkeypatch.setenv("HIGGS_GATEWAY_SERVER__PORT", "8200")  # the environment wins over the file
    assert serve_main(["--config", str(config), "--print-config"]) == 0
    out = capsys.readouterr().out
    for secret in ("redis-pass-123", "hf-secret-456", "admin-secret-789"):
        assert secret not in out
    document = yaml.safe_load(out)
    assert document["server"]["port"] == 8200
    assert document["auth"]["admin_token"] == "**********"
    assert document["state"]["redis_url"] == "**********"
    assert document["pools"]["low_latency"]["launch"]["env"] == {"HF_TOKEN": "**********", "VLLM_LOGGING_LEVEL": "INFO"}
    assert document["pools"]["high_throughput"]["profile"] == HT_PROFILE  # defaults included


def test_check_passes_a_good_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "ok.yaml", {"data_dir": str(tmp_path / "data")})
    assert serve_main(["--config", str(config), "--check"]) == 0
    assert capsys.readouterr().out.strip() == f"{config}: ok"
    assert not (tmp_path / "data").exists()  # nothing was started or created


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"server": {"port": 70000}, "routing": {"polcy": "adaptive"}}, "server.port"),
        ({"pools": {"high_throughput": {"profile": "missing-profile.yaml"}}}, "pools.high_throughput.profile"),
        # Launched pools get the role rules: a high-throughput profile cannot serve low-latency.
        ({"pools": {"low_latency": {"profile": HT_PROFILE, "launch": {"gpus": ["0"]}}}}, "needs a low-latency profile"),
    ],
)
def test_check_fails_a_broken_config_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, object], problem: str
) -> None:
    config = write_config(tmp_path / "broken.yaml", document)
    assert serve_main(["--config", str(config), "--check"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and problem in captured.err


def test_check_and_print_config_exclude_each_other() -> None:
    result = run_cli("serve", "--check", "--print-config")
    assert result.returncode == 2 and "not allowed with" in result.stderr
