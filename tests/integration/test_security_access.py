"""Security, access: API keys (stored hashed, several, rate-limited per key), an admin token
that is not an API key, ``ref_audio`` URLs refused before any worker sees them, logs
without request text or secrets, CORS off unless configured.

A gateway process with three API keys configured as sha256 digests, a tiny refill rate
(one token per 100 s, so the burst is all a key gets during the test, however slow the
machine) and one allowed ``ref_audio`` host, over one emulated worker per pool.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.security.auth import hash_key
from tests.integration.conftest import ADMIN, LONG_TEXT, SHORT_TEXT, gateway_metric, speech_body, wait_idle
from tests.integration.reliability_support import log_records, reference_wav, worker_counters
from tests.support.clip_server import ClipServer, clip_server
from tests.support.procs import free_port
from tests.support.stack import ADMIN_TOKEN, Stack, gateway_config, running_gateway, running_stack

KEY_A = "sk-test-alpha-7f3c2a9e51d04b8c"
KEY_B = "sk-test-bravo-0c91d6e2a7b34f15"
KEY_LIMITED = "sk-test-charlie-5e8b1f4c3a2d9e70"
BURST = 60  # every key's whole allowance during the test; the limited key spends it
ALLOWED_HOST = "media.example.com"
ORIGIN = "https://app.example.com"
SECRET_TEXT = "Zebra quartz marmalade seventeen: the private sentence nobody may log."
EXTRA = {
    "auth": {
        "api_key_sha256": [hash_key(KEY_A), hash_key(KEY_B), hash_key(KEY_LIMITED)],
        "rate_limit_rps": 0.01,
        "rate_limit_burst": BURST,
        "ref_audio_url_hosts": [ALLOWED_HOST],
    },
}


@pytest.fixture(scope="module")
def clips() -> Iterator[ClipServer]:
    """A listed host's clips on 127.0.0.1: workers fetch ref_audio URLs themselves."""
    with clip_server() as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, clips: ClipServer) -> Iterator[Stack]:
    hosts = [ALLOWED_HOST, clips.url.removeprefix("http://")]
    extra = {**EXTRA, "auth": {**EXTRA["auth"], "ref_audio_url_hosts": hosts}}
    with running_stack(tmp_path_factory.mktemp("security"), 1, 1, time_scale=0.02, extra=extra) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def worker_urls(stack: Stack) -> list[str]:
    return [procs[0].url for procs in stack.workers.values()]


def assert_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, object]:
    assert response.status_code == status, f"expected {status} {code}, got {response.status_code}: {response.text}"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == code and error["param"] == param, error
    return error


def test_v1_needs_one_of_the_configured_keys(stack: Stack) -> None:
    for path in ("/v1/models", "/v1/audio/models", "/v1/audio/voices"):
        missing = httpx.get(f"{stack.url}{path}", timeout=10)
        assert_error(missing, 401, "missing_api_key")
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert_error(httpx.get(f"{stack.url}{path}", headers=bearer("sk-not-a-key"), timeout=10), 401, "invalid_api_key")
        # The digest itself is not a key: a leaked config gives nobody access.
        assert_error(httpx.get(f"{stack.url}{path}", headers=bearer(hash_key(KEY_A)), timeout=10), 401, "invalid_api_key")
    speech = httpx.post(f"{stack.url}/v1/audio/speech", json=speech_body(response_format="pcm"), timeout=30)
    assert_error(speech, 401, "missing_api_key")
    for key in (KEY_A, KEY_B):
        assert httpx.get(f"{stack.url}/v1/models", headers=bearer(key), timeout=10).status_code == 200
    # Probes and scrapes are not behind the API keys.
    for path in ("/health", "/ready", "/metrics"):
        assert httpx.get(f"{stack.url}{path}", timeout=10).status_code == 200, path

    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY_B, max_retries=0)
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input=SHORT_TEXT, response_format="pcm")
    assert len(audio.content) > 48_000
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{stack.url}/v1", api_key="sk-wrong", max_retries=0).models.list()


def test_the_rate_limit_is_per_key_and_answers_429_with_retry_after(stack: Stack) -> None:
    rejected_before = gateway_metric(stack.url, "higgs_gateway_rejections_total", reason="rate_limited")
    statuses = [
        httpx.get(f"{stack.url}/v1/models", headers=bearer(KEY_LIMITED), timeout=10).status_code for _ in range(BURST)
    ]
    assert statuses == [200] * BURST, statuses
    limited = httpx.post(
        f"{stack.url}/v1/audio/speech", json=speech_body(response_format="pcm"), headers=bearer(KEY_LIMITED), timeout=30
    )
    error = assert_error(limited, 429, "rate_limit_exceeded")
    assert int(limited.headers["retry-after"]) >= 1, limited.headers
    assert "rate" in str(error["message"]).lower()
    assert gateway_metric(stack.url, "higgs_gateway_rejections_total", reason="rate_limited") == rejected_before + 1
    # Another key has its own bucket; failed authentications spend nobody's.
    for _ in range(3):
        assert httpx.get(f"{stack.url}/v1/models", headers=bearer("sk-not-a-key"), timeout=10).status_code == 401
    assert httpx.get(f"{stack.url}/v1/models", headers=bearer(KEY_B), timeout=10).status_code == 200
    with pytest.raises(openai.RateLimitError):
        openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY_LIMITED, max_retries=0).models.list()


TENANT_KEY, OTHER_TENANT_KEY = "sk-test-tenant-one-2b7e9c1d", "sk-test-tenant-two-8f0a3e6b"
TIERED = {
    "auth": {
        "tiers": {"one-stream": {"max_concurrent_streams": 1, "max_sessions": 1}},
        "keys": [
            {"name": "tenant-one", "sha256": hash_key(TENANT_KEY), "tier": "one-stream"},
            {"name": "tenant-two", "sha256": hash_key(OTHER_TENANT_KEY), "tier": "one-stream"},
        ],
        "per_key_metrics": True,
    }
}


def test_a_key_over_its_tiers_concurrent_streams_gets_429_and_is_counted_by_name(tmp_path: Path) -> None:
    # Time scale 0.5: a long text streams for seconds, so the first stream is still running
    # while the other requests are made (a slower machine only lengthens it).
    with running_stack(tmp_path, 1, 0, time_scale=0.5, extra=TIERED) as tiered:
        url, speech = f"{tiered.url}/v1/audio/speech", speech_body(LONG_TEXT, response_format="pcm")
        with httpx.Client(timeout=60) as client, client.stream("POST", url, json=speech, headers=bearer(TENANT_KEY)) as first:
            assert first.status_code == 200
            chunks = first.iter_bytes()
            received = [next(chunks)]  # audio flows: the key's one stream is in use
            second = httpx.post(url, json=speech_body(response_format="pcm"), headers=bearer(TENANT_KEY), timeout=30)
            error = assert_error(second, 429, "concurrent_streams_exceeded")
            assert error["type"] == "requests" and "one-stream" in str(error["message"])
            assert second.headers["retry-after"] == "1"
            with pytest.raises(openai.RateLimitError):
                openai.OpenAI(base_url=f"{tiered.url}/v1", api_key=TENANT_KEY, max_retries=0).audio.speech.create(
                    model="tts-1", voice="alloy", input=SHORT_TEXT, response_format="pcm"
                )
            # Another key of the same tier has its own slot; listings are not streams.
            other = httpx.post(url, json=speech_body(response_format="pcm"), headers=bearer(OTHER_TENANT_KEY), timeout=30)
            assert other.status_code == 200 and other.content
            assert httpx.get(f"{tiered.url}/v1/models", headers=bearer(TENANT_KEY), timeout=10).status_code == 200
            assert gateway_metric(tiered.url, "higgs_gateway_key_streams", tier="one-stream", key="tenant-one") == 1
            received.extend(chunks)
        assert sum(map(len, received)) > 48_000 * 5  # the first stream went on undisturbed
        again = httpx.post(url, json=speech_body(response_format="pcm"), headers=bearer(TENANT_KEY), timeout=30)
        assert again.status_code == 200, again.text  # its slot came back when it ended

        def count(key: str, result: str) -> float:
            return gateway_metric(tiered.url, "higgs_gateway_key_requests_total", tier="one-stream", key=key, result=result)

        assert count("tenant-one", "stream_limited") == 2
        assert count("tenant-one", "admitted") == 3  # two streams and a listing
        assert count("tenant-two", "admitted") == 1
        assert gateway_metric(tiered.url, "higgs_gateway_key_streams", tier="one-stream", key="tenant-one") == 0
        assert gateway_metric(tiered.url, "higgs_gateway_key_audio_seconds_total", tier="one-stream", key="tenant-one") > 1
        assert gateway_metric(tiered.url, "higgs_gateway_rejections_total", sla_class="balanced", reason="stream_limited") == 2
        metrics_text = httpx.get(f"{tiered.url}/metrics", timeout=10).text
        assert TENANT_KEY not in metrics_text and hash_key(TENANT_KEY) not in metrics_text


def test_the_admin_token_and_api_keys_are_not_interchangeable(stack: Stack) -> None:
    for key in (KEY_A, KEY_B):
        response = httpx.get(f"{stack.url}/admin/pools", headers=bearer(key), timeout=10)
        assert_error(response, 401, "invalid_admin_token")
        patch = httpx.patch(f"{stack.url}/admin/routing", headers=bearer(key), json={"policy": "round_robin"}, timeout=10)
        assert patch.status_code == 401, patch.text
    assert_error(httpx.get(f"{stack.url}/v1/models", headers=ADMIN, timeout=10), 401, "invalid_api_key")
    assert httpx.get(f"{stack.url}/admin/routing", headers=ADMIN, timeout=10).json()["policy"] == "adaptive"


REFUSED_URLS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://127.0.0.1:8000/admin/pools",
    "https://evil.example.net/clip.wav",
    f"https://{ALLOWED_HOST}.evil.example.net/clip.wav",
    f"https://{ALLOWED_HOST}@evil.example.net/clip.wav",
    f"https://evil.example.net/{ALLOWED_HOST}/clip.wav",
    "file:///etc/passwd",
    "ftp://media.example.com/clip.wav",
    "//evil.example.net/clip.wav",
    "http://2130706433/clip.wav",
    f"https://{ALLOWED_HOST}\\@evil.example.net/clip.wav",
    "data:text/plain;base64,aGVsbG8=",
    "data:audio/wav;base64," + base64.b64encode(b"this is not audio at all").decode(),
]


def test_ref_audio_urls_off_the_allow_list_never_reach_a_worker(stack: Stack, clips: ClipServer) -> None:
    before = {url: worker_counters(url) for url in worker_urls(stack)}
    for value in REFUSED_URLS:
        response = httpx.post(
            f"{stack.url}/v1/audio/speech",
            json=speech_body(response_format="pcm", ref_audio=value),
            headers=bearer(KEY_A),
            timeout=30,
        )
        assert response.status_code == 400, f"{value!r} was not refused: {response.status_code} {response.text}"
        code = response.json()["error"]["code"]
        assert code in ("invalid_ref_audio", "ref_audio_host_not_allowed"), code
        assert_error(response, 400, code, param="ref_audio")
    after = {url: worker_counters(url) for url in worker_urls(stack)}
    assert after == before, f"a refused ref_audio reached a worker: {before} -> {after}"

    # What is allowed does reach a worker: a data: URI with real audio, and a listed host
    # (which the worker then fetches).
    data_uri = "data:audio/wav;base64," + base64.b64encode(reference_wav()).decode()
    fetched = clips.hits["/clip.wav"]
    for value in (data_uri, f"{clips.url}/clip.wav"):
        response = httpx.post(
            f"{stack.url}/v1/audio/speech",
            json=speech_body(response_format="pcm", ref_audio=value),
            headers={**bearer(KEY_A), "x-sla-class": "latency"},
            timeout=30,
        )
        assert response.status_code == 200 and response.content, response.text
    ll = stack.workers["low_latency"][0].url
    assert worker_counters(ll)["success"] == before[ll]["success"] + 2
    assert clips.hits["/clip.wav"] == fetched + 1
    wait_idle(stack.url, worker_urls(stack))


def test_logs_hold_no_request_text_and_no_secret(stack: Stack) -> None:
    request_id = "secret-text-probe-1"
    ok = httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(SECRET_TEXT, response_format="pcm"),
        headers={**bearer(KEY_A), "x-request-id": request_id},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    bad = httpx.post(
        f"{stack.url}/v1/audio/speech",
        json={**speech_body(SECRET_TEXT), "temperature": 1},
        headers={**bearer(KEY_B), "x-request-id": "secret-text-probe-2"},
        timeout=30,
    )
    assert bad.status_code == 400
    assert SECRET_TEXT not in bad.text, "error messages do not echo the input either"
    httpx.get(f"{stack.url}/admin/config", headers=ADMIN, timeout=10)
    httpx.get(f"{stack.url}/v1/models", headers=bearer("sk-guessed-key-123456"), timeout=10)

    log = stack.gateway.log()
    access = [r for r in log_records(log) if r.get("logger") == "higgs_gateway.access"]
    mine = [entry for entry in access if entry.get("request_id") == request_id]
    assert mine and mine[0]["status"] == 200, "the request was logged (so absence below means something)"
    for secret in (SECRET_TEXT, "Zebra quartz", KEY_A, KEY_B, KEY_LIMITED, "sk-guessed-key-123456", ADMIN_TOKEN):
        assert secret not in log, f"{secret!r} appears in the gateway's log"


def test_cors_is_off_unless_origins_are_configured(stack: Stack, tmp_path: Path) -> None:
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    plain = httpx.get(f"{stack.url}/v1/models", headers={**bearer(KEY_A), "Origin": ORIGIN}, timeout=10)
    assert plain.status_code == 200
    assert "access-control-allow-origin" not in plain.headers
    options = httpx.options(f"{stack.url}/v1/audio/speech", headers=preflight, timeout=10)
    assert "access-control-allow-origin" not in options.headers, options.headers

    ll, ht = worker_urls(stack)
    config = gateway_config(tmp_path, [ll], [ht], free_port(), {**EXTRA, "server": {"cors_origins": [ORIGIN]}})
    with running_gateway(tmp_path, config, name="cors-gateway") as gateway:
        allowed = httpx.options(f"{gateway.url}/v1/audio/speech", headers=preflight, timeout=10)
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in allowed.headers["access-control-allow-methods"]
        simple = httpx.get(f"{gateway.url}/v1/models", headers={**bearer(KEY_A), "Origin": ORIGIN}, timeout=10)
        assert simple.headers["access-control-allow-origin"] == ORIGIN
        assert "x-request-id" in simple.headers["access-control-expose-headers"].lower()
        elsewhere = {**bearer(KEY_A), "Origin": "https://evil.example.net"}
        other = httpx.get(f"{gateway.url}/v1/models", headers=elsewhere, timeout=10)
        assert "access-control-allow-origin" not in other.headers
