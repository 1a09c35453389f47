"""profile_check: every rule on a fixture that breaks exactly it, the CLI's output and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.worker.profile import REPO_PROFILES_DIR, load_deploy_profile
from gateway.supervisor.profile_check import (
    COMMITTED_PROFILES,
    Severity,
    check_file,
    check_profile,
    has_errors,
    main,
)
from gateway.types import PoolName

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
LL = "higgs_multimodal_qwen3_low_latency.yaml"
HT = "higgs_multimodal_qwen3_high_throughput.yaml"

# fixture -> (severity, key paths that must be reported; nothing else may be)
BROKEN = {
    "ll_triton_attention.yaml": (Severity.ERROR, {"stages[0].attention_backend"}),
    "ll_trtllm_attention.yaml": (Severity.ERROR, {"stages[0].attention_config.use_trtllm_attention"}),
    "ht_trtllm_unpinned.yaml": (Severity.ERROR, {"stages[0].attention_config.use_trtllm_attention"}),
    "ll_piecewise_graph.yaml": (Severity.ERROR, {"stages[0].compilation_config.cudagraph_mode"}),
    "ll_capture_sizes_short.yaml": (Severity.ERROR, {"stages[0].compilation_config.cudagraph_capture_sizes"}),
    "ht_decode_graph.yaml": (
        Severity.ERROR,
        {"stages[0].compilation_config.cudagraph_mode", "stages[0].compilation_config.cudagraph_capture_sizes"},
    ),
    "stage1_not_eager.yaml": (Severity.ERROR, {"stages[1].enforce_eager"}),
    "no_async_chunk.yaml": (Severity.WARNING, {"async_chunk"}),
    "no_codec_streaming.yaml": (Severity.WARNING, {"connectors.connector_of_shared_memory.extra.codec_streaming"}),
    "missing_code2wav.yaml": (Severity.ERROR, {"stages"}),
}


def test_every_fixture_is_covered() -> None:
    assert {p.name for p in FIXTURES.glob("*.yaml")} == set(BROKEN)


@pytest.mark.parametrize("name", COMMITTED_PROFILES)
def test_committed_profiles_pass(name: str) -> None:
    assert check_file(REPO_PROFILES_DIR / name) == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_fixture_breaks_its_one_rule(name: str) -> None:
    severity, keys = BROKEN[name]
    findings = check_file(FIXTURES / name)
    assert {f.key for f in findings} == keys
    assert all(f.severity is severity for f in findings)
    assert all(f.source.endswith(name) for f in findings)
    assert has_errors(findings) is (severity is Severity.ERROR)


def test_finding_text_names_file_key_and_reason() -> None:
    (finding,) = check_file(FIXTURES / "ll_trtllm_attention.yaml")
    text = str(finding)
    assert "ll_trtllm_attention.yaml" in text
    assert "stages[0].attention_config.use_trtllm_attention" in text
    assert "error" in text and "XQA" in text


def test_capture_sizes_covering_max_num_seqs_without_listing_it_pass() -> None:
    # Batches pad up to the next captured size: 32 covers max_num_seqs 16.
    profile = load_deploy_profile(LL, {"0": {"compilation_config": {"cudagraph_capture_sizes": [1, 4, 32]}}})
    assert check_profile(profile) == []


def test_missing_capture_sizes_fail_a_low_latency_profile() -> None:
    profile = load_deploy_profile(LL, {"0": {"compilation_config": {"cudagraph_capture_sizes": []}}})
    assert [f.key for f in check_profile(profile)] == ["stages[0].compilation_config.cudagraph_capture_sizes"]


def test_raising_max_num_seqs_past_the_captured_sizes_fails() -> None:
    profile = load_deploy_profile(LL, {"0": {"max_num_seqs": 32}})
    assert [f.key for f in check_profile(profile)] == ["stages[0].compilation_config.cudagraph_capture_sizes"]


def test_key_paths_follow_the_file_order_of_stages() -> None:
    raw_ll = load_deploy_profile(LL).raw
    swapped = dict(raw_ll, stages=list(reversed(raw_ll["stages"])))
    swapped["stages"][0] = dict(swapped["stages"][0], enforce_eager=False)  # stage 1, now listed first
    from gateway.worker.profile import parse_deploy_profile

    findings = check_profile(parse_deploy_profile(swapped, source="swapped.yaml"))
    assert [f.key for f in findings] == ["stages[0].enforce_eager"]


@pytest.mark.parametrize(
    ("name", "role", "ok"),
    [
        (LL, PoolName.LOW_LATENCY, True),
        (HT, PoolName.HIGH_THROUGHPUT, True),
        (LL, PoolName.HIGH_THROUGHPUT, False),
        (HT, PoolName.LOW_LATENCY, False),
        ("higgs_multimodal_qwen3.yaml", PoolName.LOW_LATENCY, False),
    ],
)
def test_pool_role_needs_the_matching_profile_kind(name: str, role: PoolName, ok: bool) -> None:
    findings = check_profile(load_deploy_profile(name), role)
    assert (findings == []) is ok
    if not ok:
        assert [f.key for f in findings] == ["stages[0].enforce_eager"]
        assert role.value in findings[0].reason


def test_cli_without_files_checks_the_committed_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    for name in COMMITTED_PROFILES:
        assert f"{name}: ok" in out


def test_cli_exit_status_is_1_on_errors_and_0_on_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(FIXTURES / "no_async_chunk.yaml")]) == 0
    assert main(["check", str(REPO_PROFILES_DIR / LL), str(FIXTURES / "stage1_not_eager.yaml")]) == 1
    out = capsys.readouterr().out
    assert "stage1_not_eager.yaml: error: stages[1].enforce_eager:" in out
    assert "no_async_chunk.yaml: warning: async_chunk:" in out


def test_cli_role_flag_and_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["check", "--role", "low_latency", HT]) == 1
    assert main(["check", str(tmp_path / "absent.yaml")]) == 1
    out = capsys.readouterr().out
    assert "absent.yaml: error: <file>:" in out


def test_cli_reports_yaml_syntax_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: [\n")
    assert main(["check", str(bad)]) == 1
    assert "bad.yaml: error: <yaml>:" in capsys.readouterr().out


def test_gateway_cli_dispatches_profiles_check() -> None:
    from gateway.cli import main as gateway_main

    assert gateway_main(["profiles", "check", LL]) == 0


UPSTREAM_HT = Path(__file__).resolve().parents[2] / "fixtures" / "profiles_valid" / "ht_upstream_decode_graph.yaml"


@pytest.mark.parametrize("role", [None, PoolName.HIGH_THROUGHPUT])
def test_a_newer_upstream_profile_is_valid_with_notes(role: PoolName | None) -> None:
    # Decode graphs, 75-frame chunks, 64 sequences on both stages: unknown to 0.30.0 but valid.
    findings = check_file(UPSTREAM_HT, role)
    assert findings and not has_errors(findings)
    assert all(f.severity is Severity.WARNING for f in findings)
    (described,) = [f for f in findings if f.key == "<profile>"]
    assert "not one of the vllm-omni 0.30.0 profiles" in described.reason
    assert "up to 64 requests, Stage 1 64" in described.reason and "75-frame chunks" in described.reason


def test_profiles_check_cli_accepts_the_newer_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--role", "high_throughput", str(UPSTREAM_HT)]) == 0
    assert "warning" in capsys.readouterr().out


def test_a_small_graph_profile_is_still_refused_for_high_throughput() -> None:
    findings = check_file(REPO_PROFILES_DIR / LL, PoolName.HIGH_THROUGHPUT)
    assert has_errors(findings)
