"""Voice affinity through the gateway, against emulated workers that cache reference codes
as the released worker does: requests with the same uploaded voice keep to the worker that
encoded it, so the fleet encodes it once; with the affinity off, the tie rotation spreads
them and every worker encodes it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import SHORT_TEXT, speech_body
from tests.integration.reliability_support import upload_voice
from tests.support.stack import running_stack

pytestmark = pytest.mark.timeout(180)

TIME_SCALE = 0.02


def encoded_references(worker_url: str) -> int:
    info = httpx.get(f"{worker_url}/emulator/info", timeout=10).json()
    return int(info["reference_caches"]["reference_code_entries"])


@pytest.mark.parametrize(("affinity", "encoding_workers"), [(True, 1), (False, 2)])
def test_requests_with_one_voice_keep_to_the_worker_that_holds_its_codes(
    tmp_path: Path, affinity: bool, encoding_workers: int
) -> None:
    # Curves at their priors: two idle low-latency workers tie exactly, so without the hint
    # the rotation alternates them.
    extra = {"routing": {"thresholds": {"voice_affinity": affinity}, "learning": {"enabled": False}}}
    with running_stack(tmp_path, ll_workers=2, ht_workers=1, time_scale=TIME_SCALE, extra=extra) as stack:
        upload_voice(stack.url, "anna")
        workers = stack.workers["low_latency"]
        assert [encoded_references(w.url) for w in workers] == [0, 0]
        served_by = []
        # One at a time, each voice request followed by two without a reference: the tie
        # rotation alone would send the voice to the other worker every time.
        for index in range(9):
            fields = {"voice": "anna"} if index % 3 == 0 else {}
            response = httpx.post(
                f"{stack.url}/v1/audio/speech",
                json=speech_body(SHORT_TEXT, response_format="pcm", **fields),
                headers={"x-sla-class": "latency"},
                timeout=60,
            )
            assert response.status_code == 200, response.text
            served_by.append(response.headers["x-gateway-pool"])
        assert set(served_by) == {"low_latency"}
        assert sum(encoded_references(w.url) > 0 for w in workers) == encoding_workers
