"""The command line refuses what a real ``vllm-omni serve`` refuses (no server started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.emulator.cli import build_parser, main
from gateway.emulator.speech_stream import StreamTimeouts

BASE = ["bosonai/higgs-audio-v3-tts-4b", "--trust-remote-code", "--deploy-config", "higgs_multimodal_qwen3_low_latency.yaml"]


def test_omni_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(BASE)
    assert caught.value.code == 2
    assert "--omni" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--stage-configs-path", "x.yaml"], ["--no-such-flag"], ["--stage", "1"]])
def test_unknown_and_removed_flags_are_errors(flag: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*BASE, "--omni", *flag])
    assert caught.value.code == 2


def test_a_broken_profile_is_reported_with_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    text = (Path(__file__).parents[3] / "profiles" / "higgs_multimodal_qwen3_low_latency.yaml").read_text()
    broken.write_text(text.replace("max_num_seqs: 16\n  gpu_memory_utilization: 0.6", "max_num_seqs: lots\n  gpu_memory_utilization: 0.6"))
    assert main(["m", "--omni", "--deploy-config", str(broken)]) == 2
    assert "stages[0].max_num_seqs" in capsys.readouterr().err


def test_missing_profile_and_bad_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["m", "--omni", "--deploy-config", "no_such_profile"]) == 2
    assert main(["m", "--omni", "--deploy-config", "higgs_multimodal_qwen3_low_latency", "--stage-overrides", '{"7": {}}']) == 2
    err = capsys.readouterr().err
    assert "no_such_profile" in err and "7" in err


def test_defaults_and_served_names() -> None:
    args = build_parser().parse_args([*BASE, "--omni", "--served-model-name", "a", "b", "--time-scale", "0.1"])
    assert args.served_model_name == ["a", "b"] and args.time_scale == 0.1 and args.seed is None
    assert args.port == 8000


def test_stream_timers_default_to_the_real_workers() -> None:
    # SSS:75–76: 30 s idle, 10 s for session.config; the flags exist only to shorten them in tests.
    args = build_parser().parse_args([*BASE, "--omni"])
    assert (args.stream_config_timeout, args.stream_idle_timeout) == (10.0, 30.0)
    assert StreamTimeouts() == StreamTimeouts(config=10.0, idle=30.0)


@pytest.mark.parametrize("flag", ["--stream-config-timeout", "--stream-idle-timeout"])
def test_stream_timers_must_be_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*BASE, "--omni", flag, "0"])
    assert caught.value.code == 2
    assert f"{flag} must be > 0" in capsys.readouterr().err


def test_model_startup_waits_the_profiles_start_up_at_the_time_scale() -> None:
    from gateway.worker.profile import load_deploy_profile
    from gateway.emulator.cli import startup_delay
    from gateway.worker.timing import StepModel

    profile = load_deploy_profile("higgs_multimodal_qwen3_low_latency.yaml")
    modelled = StepModel(profile).startup_seconds()
    plain = build_parser().parse_args([*BASE, "--omni", "--time-scale", "0.01", "--startup-delay", "0.5"])
    assert startup_delay(plain, profile) == 0.5
    scaled = build_parser().parse_args([*BASE, "--omni", "--time-scale", "0.01", "--startup-delay", "0.5", "--model-startup"])
    assert startup_delay(scaled, profile) == pytest.approx(0.5 + modelled * 0.01)


def test_audio_fault_flags_and_their_bound(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([*BASE, "--omni", "--fault-noisy-from", "8", "--fault-silent-from", "4", "--fault-clipped-from", "16"])
    assert (args.fault_noisy_from, args.fault_silent_from, args.fault_clipped_from) == (8, 4, 16)
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args([*BASE, "--omni", "--fault-noisy-from", "0"])
    assert caught.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err
