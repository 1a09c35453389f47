"""``higgs-gateway acceptance``: its launches (checked against the released CLI's flags), its
checks and its report, on made-up sweeps (the end-to-end run is the command itself)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.acceptance.checks import checks
from gateway.acceptance.measure import QualityRound, VariantResult
from gateway.acceptance.report import markdown, tune_document, write
from gateway.acceptance.variants import HIGH_THROUGHPUT, LOW_LATENCY, LOW_LATENCY_XQA, VARIANTS, launch_for
from gateway.bench.tune import find_crossover
from gateway.config import VLLM_OMNI_COMMAND
from gateway.worker.profile import load_deploy_profile
from gateway.emulator.cli import build_parser
from gateway.supervisor.command import build_spec
from gateway.worker.timing import StepModel


def real_argv(tmp_path: Path, variant: Any) -> list[str]:
    launch = launch_for(variant, gpu="3", emulate=False, time_scale=1.0)
    spec = build_spec(variant.pool, launch, variant.profile_path, "higgs", tmp_path, 0, "3", 9100)
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "3"
    return list(spec.argv)


def test_real_mode_launches_the_supervisors_vllm_omni_command_and_only_xqa_adds_the_override(tmp_path: Path) -> None:
    for variant in VARIANTS:
        argv = real_argv(tmp_path, variant)
        assert argv[:3] == ["vllm-omni", "serve", "bosonai/higgs-audio-v3-tts-4b"]
        assert len(argv) == len(VLLM_OMNI_COMMAND) + (2 if variant is LOW_LATENCY_XQA else 0)
        assert ("--stage-overrides" in argv) is (variant is LOW_LATENCY_XQA)


def test_every_launch_parses_with_the_released_cli_and_the_xqa_one_turns_xqa_on(tmp_path: Path) -> None:
    # The emulator's parser is vllm-omni 0.30.0 serve's (its flags, abbreviations and
    # refusals; tests/unit/emulator/test_real_worker_fidelity.py): what it rejects, the
    # released worker rejects at start.
    for variant in VARIANTS:
        args = build_parser().parse_args(real_argv(tmp_path, variant)[2:])
        assert args.omni and args.enable_server_load_tracking and args.deploy_config == str(variant.profile_path)
        profile = load_deploy_profile(args.deploy_config, args.stage_overrides)
        assert profile.talker.use_trtllm_attention is (variant is LOW_LATENCY_XQA)
        assert StepModel(profile).xqa_decode is (variant is LOW_LATENCY_XQA)
    emulated = launch_for(LOW_LATENCY, gpu="0", emulate=True, time_scale=0.25).command
    assert emulated[emulated.index("--time-scale") + 1] == "0.25" and "emulate" in emulated


def test_the_emulated_xqa_path_is_slower_by_the_published_ratio() -> None:
    native = StepModel(load_deploy_profile(LOW_LATENCY.profile_path))
    xqa = StepModel(load_deploy_profile(LOW_LATENCY.profile_path, LOW_LATENCY_XQA.stage_overrides))
    ratio = xqa.step(1, 0, 500, set()).seconds / native.step(1, 0, 500, set()).seconds
    assert abs(ratio - 0.3405 / 0.3233) < 1e-9


def phase(concurrency: int, ttfp: float, rtf: float) -> dict[str, Any]:
    return {"concurrency": concurrency, "ok": 16, "audio_s": 80.0, "ttfp_s": {"median": ttfp, "mean": ttfp}, "rtf": {"mean": rtf}}


def result(variant: Any, curve: dict[int, tuple[float, float]], dirty: bool = False) -> VariantResult:
    sweep = {"label": variant.name, "params": {}, "phases": [phase(c, t, r) for c, (t, r) in curve.items()]}
    rounds = [QualityRound(c, {"ok": c} if not (dirty and c >= 8) else {"ok": 1, "noisy": c - 1}, [12.0]) for c in curve]
    return VariantResult(variant, sweep, rounds, 10.0)


def calibrated(dirty: bool = False) -> dict[str, VariantResult]:
    return {
        "low_latency": result(LOW_LATENCY, {1: (0.17, 0.28), 4: (0.2, 0.33), 16: (0.3, 0.5)}),
        "low_latency_xqa": result(LOW_LATENCY_XQA, {1: (0.1796, 0.2949), 4: (0.21, 0.35), 16: (0.31, 0.53)}),
        "high_throughput": result(HIGH_THROUGHPUT, {1: (0.2, 0.39), 4: (0.22, 0.4), 16: (0.33, 0.47)}, dirty),
    }


def test_a_run_that_matches_the_calibration_passes_every_check_and_a_noisy_profile_fails_its_own() -> None:
    results = calibrated()
    tune = tune_document(results)
    crossover = find_crossover({1: 0.28, 4: 0.33, 16: 0.5}, {1: 0.39, 4: 0.4, 16: 0.47})
    found = checks(results, crossover, emulated=True)
    assert [c.name for c in found if not c.passed] == []
    assert len(found) == 12
    noisy = checks(calibrated(dirty=True), crossover, emulated=True)
    assert [c.name for c in noisy if not c.passed] == ["high_throughput audio quality"]
    assert "c16: {'ok': 1, 'noisy': 15}" in next(c.detail for c in noisy if not c.passed)
    # Real hardware: no calibration lines, the A/B direction, the crossing and quality only.
    assert len(checks(results, crossover, emulated=False)) == 6
    assert tune["recommendation"]["measured"]["low_latency"]["ttfp_s"] == {1: 0.17, 4: 0.2, 16: 0.3}


def test_the_report_has_the_notes_sections_and_the_files_tune_can_apply(tmp_path: Path) -> None:
    results = calibrated()
    tune = tune_document(results)
    found = checks(results, find_crossover({1: 0.28, 16: 0.5}, {1: 0.39, 16: 0.47}), emulated=True)
    text = markdown(results, tune, found, command="higgs-gateway acceptance --emulate --out x", emulated=True, time_scale=0.25)
    for section in ("## Decode path of the low-latency Stage 0", "## Low-latency vs high-throughput",
                    "## Audio quality per profile", "## Checks", "## Routing prior"):  # fmt: skip
        assert section in text
    assert "| FlashInfer → TRT-LLM XQA | true | 179.6 | 0.2949 | 175.76 ms / 0.3405 |" in text
    assert "PASS  high_throughput audio quality" in text
    paths = write(tmp_path, results, tune, found, text)
    assert {p.name for p in paths} == {"report.md", "tune.json", "thresholds.yaml", "checks.json", "runs.json"}
    written = json.loads((tmp_path / "tune.json").read_text())
    assert set(written) == {"recommendation", "measurements"} and "measured" in written["recommendation"]
    assert "balanced_threshold" in (tmp_path / "thresholds.yaml").read_text()


def test_variants_must_include_both_profiles(capsys: Any) -> None:
    from gateway.acceptance.cli import main

    assert main(["--out", "unused", "--emulate", "--variants", "low_latency,low_latency_xqa"]) == 2
    assert "both low_latency and high_throughput" in capsys.readouterr().err
    assert main(["--out", "unused", "--emulate", "--variants", "low_latency,high_throughput,other"]) == 2
