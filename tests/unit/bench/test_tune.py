"""The tuner's analysis and its admin call, without any server."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.bench.tune import apply, balanced_threshold, find_crossover, measured_curves, recommend
from gateway.config import RoutingConfig
from gateway.types import PoolName

# The calibration table's shape: low-latency leads at c <= 4 and loses from c = 8.
LL = {1: 0.276, 2: 0.30, 4: 0.34, 8: 0.44, 16: 0.491}
HT = {1: 0.389, 2: 0.39, 4: 0.40, 8: 0.42, 16: 0.475}


def test_crossover_interpolates_between_the_last_win_and_the_first_loss() -> None:
    found = find_crossover(LL, HT)
    assert (found.last_win, found.first_loss) == (4, 8)
    # diff -0.06 at 4 and +0.02 at 8: the lines meet three quarters of the way, at 7.
    assert found.crossing == pytest.approx(7.0)
    assert found.slots_per_worker == 7


def test_low_latency_winning_everywhere_recommends_the_largest_level() -> None:
    found = find_crossover({1: 0.2, 4: 0.3}, {1: 0.4, 4: 0.5})
    assert (found.last_win, found.first_loss, found.crossing) == (4, None, None)
    assert found.slots_per_worker == 4


def test_low_latency_losing_from_the_start_recommends_one_slot() -> None:
    found = find_crossover({1: 0.5, 2: 0.6}, {1: 0.4, 2: 0.45})
    assert (found.last_win, found.first_loss) == (None, 1)
    assert found.slots_per_worker == 1


def test_only_shared_levels_are_compared() -> None:
    assert find_crossover({1: 0.2, 3: 0.9}, {1: 0.3, 2: 0.1}).first_loss is None
    with pytest.raises(ValueError):
        find_crossover({1: 0.2}, {2: 0.3})


def test_balanced_threshold_is_the_low_latency_pool_share() -> None:
    assert balanced_threshold(4, 3) == 12
    assert balanced_threshold(4, 0) == 4


def _document(points: dict[int, float]) -> dict:
    phases = [
        {"concurrency": c, "ok": 8, "audio_s": 80.0, "rtf": {"mean": v}, "ttfp_s": {"median": v / 2, "mean": v / 2}}
        for c, v in points.items()
    ]
    return {"phases": phases}


def test_recommendation_from_measured_documents() -> None:
    documents = {PoolName.LOW_LATENCY: _document(LL), PoolName.HIGH_THROUGHPUT: _document(HT)}
    rec = recommend(documents, "rtf", ll_workers=2)
    assert rec["slots_per_worker"] == 7
    assert rec["balanced_threshold"] == 14


def test_measured_curves_are_decode_rtf_and_median_ttfp_per_worker_load() -> None:
    documents = {PoolName.LOW_LATENCY: _document(LL), PoolName.HIGH_THROUGHPUT: _document(HT)}
    curves = measured_curves(documents)
    assert set(curves) == {"low_latency", "high_throughput"}
    ll = curves["low_latency"]
    assert set(ll["rtf"]) == set(ll["ttfp_s"]) and min(ll["rtf"]) == 1
    # 10 s clips: the TTFP's share (0.138 s / 10 s) comes off the end-to-end RTF.
    assert ll["rtf"][1] == pytest.approx(0.276 - 0.138 / 10) and ll["ttfp_s"][1] == pytest.approx(0.138)
    # A valid `routing.measured` document, as --apply sends it.
    RoutingConfig.model_validate({"measured": curves})


def test_apply_patches_everything_recommended_with_the_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    rec = {"balanced_threshold": 12, "measured": {"low_latency": {"rtf": {1: 0.3}, "ttfp_s": {1: 0.2}}}}
    status, _ = apply("http://gw:8000/", "s3cret", rec, httpx.Client(transport=httpx.MockTransport(handler)))
    assert status == 200
    (request,) = seen
    assert request.method == "PATCH" and request.url.path == "/admin/routing"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert json.loads(request.content) == {
        "measured": {"low_latency": {"rtf": {"1": 0.3}, "ttfp_s": {"1": 0.2}}},
        "thresholds": {"balanced_threshold": 12},
    }
