"""Security, logs: no API key, right or wrong, reaches any log line of a served gateway.

Browsers cannot set ``Authorization`` on a WebSocket, so a key may ride in the URL
(``?api_key=``) or as the subprotocol ``bearer.<key>``. The servers under the app log the
handshake themselves (uvicorn: ``"WebSocket /path?query" [accepted]``), so the test reads
the whole log of a real gateway process: uvicorn's lines included, as an operator would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gateway.security.auth import hash_key
from tests.support.stack import Stack, running_stack

KEY = "sk-log-secret-right-3b9f0c2e7a51d84c"
WRONG_KEY = "sk-log-secret-wrong-6e1a9d4c08b27f35"
SUBPROTOCOL_KEY_WRONG = "sk-log-secret-subprotocol-55aa01ff"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    extra = {"auth": {"api_key_sha256": [hash_key(KEY)]}, "logging": {"level": "DEBUG"}}
    with running_stack(tmp_path_factory.mktemp("log-secrets"), 1, 1, extra=extra) as running:
        yield running


def ws_url(stack: Stack) -> str:
    return stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def test_query_and_subprotocol_keys_never_reach_the_log(stack: Stack) -> None:
    url = ws_url(stack)
    with connect(f"{url}?api_key={KEY}&lang=en"):
        pass
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{url}?api_key={WRONG_KEY}")
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus):
        connect(url, subprotocols=["higgs-gateway", f"bearer.{SUBPROTOCOL_KEY_WRONG}"])  # type: ignore[list-item]
    # Plain HTTP too: a key in any query string, and in a bad Authorization header.
    httpx.get(f"{stack.url}/v1/models?api_key={WRONG_KEY}", timeout=10)
    httpx.get(f"{stack.url}/v1/models", headers={"Authorization": f"Bearer {WRONG_KEY}"}, timeout=10)
    stack.gateway.stop()  # everything flushed and written
    log = stack.gateway.log()
    # The servers' own handshake lines are in the log (the test reads what was written)...
    handshakes = [line for line in log.splitlines() if "WebSocket /v1/audio/speech/stream" in line]
    assert len(handshakes) >= 3, log[-3000:]
    assert any("[accepted]" in line and "lang=en" in line for line in handshakes), handshakes
    # ...and no key, right or wrong, in any line.
    for secret in (KEY, WRONG_KEY, SUBPROTOCOL_KEY_WRONG):
        assert secret not in log, [line for line in log.splitlines() if secret in line]
    for line in log.splitlines():
        if line.startswith("{"):
            json.loads(line)  # still one JSON object per line after masking
