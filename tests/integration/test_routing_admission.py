"""Admission and the admin surface: a full queue is 429, no worker (or no slot in time) is
503, each with ``Retry-After``, ``x-gateway-dropped-reason`` and an OpenAI envelope; admin
routes want the admin token and do not exist without one.

One slot per worker and a queue of one ``balanced`` request make "full" cheap to reach.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import ADMIN, SHORT_TEXT, speech_body, wait_idle, wait_until, worker_entry
from tests.support.procs import free_port
from tests.support.stack import Stack, gateway_config, running_gateway, running_stack

VERY_LONG_TEXT = " ".join([SHORT_TEXT] * 18)
EXTRA = {
    "pools": {"low_latency": {"slots_per_worker": 1}, "high_throughput": {"slots_per_worker": 1}},
    # One place per worker and none held back for `latency`: two requests fill the fleet.
    "routing": {"thresholds": {"reserve_for_latency": 0}},
    "admission": {"queue_size": {"balanced": 1}, "max_wait_s": {"balanced": 60, "latency": 0.3}, "retry_after_s": 3},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("admission"), 1, 1, time_scale=0.1, extra=EXTRA) as running:
        yield running


def worker_urls(stack: Stack) -> list[str]:
    return [procs[0].url for procs in stack.workers.values()]


def assert_rejected(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status, f"expected {status} {reason}, got {response.status_code}: {response.text}"
    assert response.headers["retry-after"] == "3"
    assert response.headers["x-gateway-dropped-reason"] == reason
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == reason and len(error["message"]) > 10, error
    assert error["type"] == ("requests" if status == 429 else "server_error"), error  # OpenAI's types


async def post(client: httpx.AsyncClient, url: str, text: str, sla_class: str) -> httpx.Response:
    return await client.post(
        f"{url}/v1/audio/speech", json=speech_body(text, response_format="pcm"), headers={"x-sla-class": sla_class}
    )


async def test_full_queue_is_429_and_no_slot_in_time_is_503(stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        # Two long requests take the only two slots; a third waits in the balanced queue.
        holders = [asyncio.create_task(post(client, stack.url, VERY_LONG_TEXT, "balanced")) for _ in range(2)]
        try:
            await asyncio.to_thread(
                wait_until,
                lambda: sum(p["inflight"] for p in _pools(stack).values()) == 2,
                30,
                "both slots taken",
            )
            queued = asyncio.create_task(post(client, stack.url, SHORT_TEXT, "balanced"))
            await asyncio.to_thread(
                wait_until, lambda: _queue_depths(stack)["balanced"] == 1, 30, "one balanced request queued"
            )
            assert_rejected(await post(client, stack.url, SHORT_TEXT, "balanced"), 429, "queue_full")
            # Latency waits at most 0.3 s here (both pools full), then gives up.
            assert_rejected(await post(client, stack.url, SHORT_TEXT, "latency"), 503, "wait_timeout")
        finally:
            for task in holders:
                task.cancel()  # the clients leave: their slots go to the queued request
            await asyncio.gather(*holders, return_exceptions=True)
        served = await queued
    assert served.status_code == 200 and served.content, served.text
    await asyncio.to_thread(wait_idle, stack.url, worker_urls(stack))


def test_no_routable_worker_is_503(stack: Stack) -> None:
    ids = [worker_entry(stack.url, url)["id"] for url in worker_urls(stack)]
    try:
        for worker_id in ids:
            assert httpx.post(f"{stack.url}/admin/workers/{worker_id}/drain", headers=ADMIN, timeout=10).status_code == 200
        response = httpx.post(f"{stack.url}/v1/audio/speech", json=speech_body(response_format="pcm"), timeout=30)
        assert_rejected(response, 503, "no_workers")
    finally:
        for worker_id in ids:
            httpx.post(f"{stack.url}/admin/workers/{worker_id}/undrain", headers=ADMIN, timeout=10)
    response = httpx.post(f"{stack.url}/v1/audio/speech", json=speech_body(response_format="pcm"), timeout=30)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "wrong"}])
def test_admin_routes_need_the_token(stack: Stack, headers: dict[str, str]) -> None:
    for method, path in (("GET", "/admin/pools"), ("GET", "/admin/routing"), ("PATCH", "/admin/routing"), ("GET", "/admin/config")):
        response = httpx.request(method, f"{stack.url}{path}", headers=headers, json={}, timeout=10)
        assert response.status_code == 401, f"{method} {path}: {response.status_code} {response.text}"
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] in ("missing_admin_token", "invalid_admin_token"), error
        assert response.headers["www-authenticate"].startswith("Bearer")
    config = httpx.get(f"{stack.url}/admin/config", headers=ADMIN, timeout=10)
    assert config.status_code == 200 and "test-admin-token" not in config.text, "the token is never echoed"


def test_admin_routes_do_not_exist_without_a_token(stack: Stack, tmp_path: Path) -> None:
    ll, ht = worker_urls(stack)
    config = gateway_config(tmp_path, [ll], [ht], free_port(), {"auth": {"admin_token": None}})
    with running_gateway(tmp_path, config, name="no-admin") as gateway:
        for headers in ({}, ADMIN):
            response = httpx.get(f"{gateway.url}/admin/pools", headers=headers, timeout=10)
            assert response.status_code == 404, response.text
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        assert httpx.patch(f"{gateway.url}/admin/routing", headers=ADMIN, json={}, timeout=10).status_code == 404
        # Indistinguishable from a route that does not exist: nothing advertises a control plane.
        unknown = httpx.get(f"{gateway.url}/no-such-route", timeout=10)
        assert unknown.status_code == 404 and unknown.json() == response.json(), (unknown.text, response.text)
        assert httpx.get(f"{gateway.url}/ready", timeout=10).status_code == 200


def _pools(stack: Stack) -> dict[str, dict[str, int]]:
    return httpx.get(f"{stack.url}/admin/pools", headers=ADMIN, timeout=10).json()["pools"]


def _queue_depths(stack: Stack) -> dict[str, int]:
    return httpx.get(f"{stack.url}/admin/pools", headers=ADMIN, timeout=10).json()["queue_depths"]
