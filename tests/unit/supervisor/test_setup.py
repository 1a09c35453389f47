"""Start-up refuses supervised pools whose profile breaks a rule (including the pool role)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.supervisor.setup import ProfileCheckFailed, build_supervisors, check_supervised_profiles

from .fakes import RecordingSink

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
LL = "higgs_multimodal_qwen3_low_latency.yaml"
HT = "higgs_multimodal_qwen3_high_throughput.yaml"


def config(ll_profile: str, ht_profile: str, **launch: object):
    return load_config(
        None,
        {
            "pools": {
                "low_latency": {"profile": ll_profile, "launch": {"gpus": ["0"], **launch}},
                "high_throughput": {"profile": ht_profile, "workers": ["http://127.0.0.1:1"]},
            }
        },
    )


def test_swapped_profiles_are_refused() -> None:
    with pytest.raises(ProfileCheckFailed, match="low_latency pool needs a low-latency profile"):
        build_supervisors(config(HT, LL), RecordingSink())


def test_only_supervised_pools_are_checked() -> None:
    # The static pool's profile is wrong for its role, but the gateway does not launch it.
    assert check_supervised_profiles(config(LL, LL)) == []
    assert len(build_supervisors(config(LL, LL), RecordingSink())) == 1


def test_broken_fixture_is_refused_with_its_key() -> None:
    with pytest.raises(ProfileCheckFailed) as info:
        build_supervisors(config(str(FIXTURES / "ll_trtllm_attention.yaml"), HT), RecordingSink())
    assert [f.key for f in info.value.findings] == ["stages[0].attention_config.use_trtllm_attention"]


def test_stage_overrides_are_checked_as_the_worker_will_run_them() -> None:
    overrides = {"0": {"max_num_seqs": 32}}
    findings = check_supervised_profiles(config(LL, HT, stage_overrides=overrides))
    assert [f.key for f in findings] == ["stages[0].compilation_config.cudagraph_capture_sizes"]


def test_warnings_do_not_refuse(caplog: pytest.LogCaptureFixture) -> None:
    supervisors = build_supervisors(config(str(FIXTURES / "no_async_chunk.yaml"), HT), RecordingSink())
    assert len(supervisors) == 1
    assert "async_chunk" in caplog.text


def test_missing_profile_is_refused() -> None:
    with pytest.raises(ProfileCheckFailed, match="not found"):
        build_supervisors(config("nope.yaml", HT), RecordingSink())


def test_a_launch_served_name_other_than_the_gateways_is_refused() -> None:
    # Requests and the warm-up name models.served_model_name: such a pool would only 404.
    with pytest.raises(ConfigError, match="launch.served_model_name .'other'. must equal"):
        config(LL, HT, served_model_name="other")


def test_profile_changes_need_every_pool_supervised() -> None:
    # A GPU changes pool by running the other pool's launch command: both must have one.
    with pytest.raises(ConfigError, match="profile_changes.enabled needs every pool supervised"):
        load_config(None, {
            "pools": {"low_latency": {"profile": LL, "launch": {"gpus": ["0"]}}, "high_throughput": {"profile": HT}},
            "supervisor": {"profile_changes": {"enabled": True}},
        })  # fmt: skip
    both = config(LL, HT)
    assert not both.supervisor.profile_changes.enabled  # off by default


def test_without_a_planner_the_switch_builds_no_changer(tmp_path: Path) -> None:
    from gateway.app import create_app

    document = {
        "data_dir": str(tmp_path),
        "pools": {"low_latency": {"profile": LL, "launch": {"gpus": ["0"]}},
                  "high_throughput": {"profile": HT, "launch": {"gpus": ["1"]}}},
        "supervisor": {"profile_changes": {"enabled": True}},
        "planner": {"enabled": False},
    }  # fmt: skip
    assert create_app(load_config(None, document)).profile_changer is None

    class Mix:
        def mix_for(self, gpus: int) -> dict[str, int] | None:
            return None

    assert create_app(load_config(None, document), desired_mix=Mix()).profile_changer is not None
    # With the fleet planner on (the default), the GPUs follow it.
    planned = create_app(load_config(None, {**document, "planner": {"enabled": True}}))
    assert planned.profile_changer is not None
