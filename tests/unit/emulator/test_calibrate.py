"""The timing model against the published figures (calibration table in docs/emulator.md)."""

from __future__ import annotations

import pytest

from gateway.worker.profile import DeployProfile
from gateway.emulator.calibrate import (
    PUBLISHED_CLONE_MEAN_RTF,
    PUBLISHED_MEAN_RTF,
    SweepPoint,
    format_table,
    main,
    simulate,
    sweep,
)

TOLERANCE = 0.15


@pytest.fixture(scope="module")
def points() -> dict[tuple[str, int], SweepPoint]:
    return {(p.profile, p.concurrency): p for p in sweep(concurrencies=(1, 2, 4, 8, 16, 32))}


def rtf(points: dict[tuple[str, int], SweepPoint], profile: str, concurrency: int) -> float:
    return points[(profile, concurrency)].mean_rtf


@pytest.mark.parametrize(("profile", "concurrency"), sorted(PUBLISHED_MEAN_RTF))
def test_mean_rtf_matches_the_published_figure(points: dict, profile: str, concurrency: int) -> None:
    published = PUBLISHED_MEAN_RTF[(profile, concurrency)]
    modelled = rtf(points, profile, concurrency)
    assert abs(modelled - published) / published <= TOLERANCE, f"{profile} c{concurrency}: {modelled:.3f} vs {published}"


@pytest.mark.parametrize(("profile", "concurrency"), sorted(PUBLISHED_CLONE_MEAN_RTF))
def test_voice_clone_mean_rtf_matches_the_published_figure(profile: str, concurrency: int) -> None:
    (point,) = sweep(profiles=(profile,), concurrencies=(concurrency,), voice_clone=True)
    published = PUBLISHED_CLONE_MEAN_RTF[(profile, concurrency)]
    assert abs(point.mean_rtf - published) / published <= TOLERANCE, f"{profile} c{concurrency}: {point.mean_rtf:.3f}"


LL = "higgs_multimodal_qwen3_low_latency.yaml"
HT = "higgs_multimodal_qwen3_high_throughput.yaml"


@pytest.mark.parametrize("concurrency", [1, 2, 4])
def test_low_latency_leads_at_low_concurrency(points: dict, concurrency: int) -> None:
    assert rtf(points, LL, concurrency) < rtf(points, HT, concurrency)


@pytest.mark.parametrize("concurrency", [8, 16, 32])
def test_high_throughput_leads_from_eight_on(points: dict, concurrency: int) -> None:
    assert rtf(points, HT, concurrency) < rtf(points, LL, concurrency)


@pytest.mark.parametrize("profile", [LL, HT])
def test_median_ttfp_at_concurrency_one(points: dict, profile: str) -> None:
    assert 0.150 <= points[(profile, 1)].median_ttfp <= 0.250


def test_low_latency_queues_beyond_sixteen(points: dict) -> None:
    at_16, at_32 = points[(LL, 16)], points[(LL, 32)]
    assert at_16.mean_queue_wait < 0.05  # only the wait for the next step boundary
    assert at_32.max_waiting >= 16
    assert at_32.mean_queue_wait > 1.0  # whole clips' worth of waiting for a slot
    assert points[(HT, 32)].mean_queue_wait < 0.05  # 64 slots: no queue yet


def test_high_throughput_carries_more_audio_per_second_at_high_concurrency(points: dict) -> None:
    assert points[(HT, 32)].audio_throughput > 1.3 * points[(LL, 32)].audio_throughput


def test_a_cold_high_throughput_worker_is_slower_than_a_warm_one(high_throughput: DeployProfile) -> None:
    cold = simulate(high_throughput, 4, requests_per_client=2, warm=False)
    warm = simulate(high_throughput, 4, requests_per_client=2, warm=True)
    assert cold.mean_rtf > warm.mean_rtf * 1.05


def test_table_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--concurrency", "1", "--requests-per-client", "2"]) == 0
    out = capsys.readouterr().out
    assert "| low_latency | 1 |" in out and "| high_throughput | 1 |" in out and "0.276" in out
    assert format_table([]).count("\n") == 1


@pytest.mark.parametrize(("profile", "concurrency"), sorted(PUBLISHED_MEAN_RTF))
def test_the_cjk_row_speaks_5_characters_a_second_at_the_english_rtf(points: dict, profile: str, concurrency: int) -> None:
    # No published Chinese RTF: the row holds the length model (4-6 characters a second)
    # and the per-step cost, which does not depend on the language, to the English run.
    (point,) = sweep(profiles=(profile,), concurrencies=(concurrency,), cjk=True)
    assert 4.0 <= point.chars_per_second <= 6.0
    english = rtf(points, profile, concurrency)
    assert abs(point.mean_rtf - english) / english <= TOLERANCE


@pytest.mark.parametrize("profile", [LL, HT])
def test_one_repeated_voice_saves_the_encode_on_every_request_but_the_first(profile: str) -> None:
    (every,) = sweep(profiles=(profile,), concurrencies=(1,), voice_clone=True)
    (repeated,) = sweep(profiles=(profile,), concurrencies=(1,), repeat_voice=True)
    saved = every.median_ttfp - repeated.median_ttfp
    assert saved == pytest.approx(6.0 * 0.006, abs=0.002)  # 6 s of clip at 6 ms a second
