"""Security, voice ownership: a voice belongs to the key that uploaded it.

Two named keys (``alice`` in a tier of two voices, ``bob`` in one without a voice quota)
over one emulated worker per pool. Bob cannot list, read, use (speech or session) or
delete Alice's voices: each answers as if the name were registered by nobody (404 on
delete, the usual 400 ``voice_not_found`` on speech), no error lists her names, and both
may register the same name without touching the other's. The admin sees and deletes
everyone's; client responses never name a worker; logs name key ids, never keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from gateway.security.auth import hash_key
from tests.integration.conftest import ADMIN, speech_body
from tests.integration.test_emulator_speech_stream import Session
from tests.support.audio import reference_wav
from tests.support.stack import Stack, running_stack

ALICE = "sk-test-alice-0d6f3b2a9c8e7154"
BOB = "sk-test-bob-7a1c5e9d3b2f6084"
ALICE_ID, BOB_ID = hash_key(ALICE)[:12], hash_key(BOB)[:12]
ALICE_CONSENT = "consent-record-alice-4711"
ALICE_TRANSCRIPT = "Alice reads this private sentence for her clone."
EXTRA = {
    "auth": {
        "keys": [
            {"name": "alice", "sha256": hash_key(ALICE), "tier": "two-voices"},
            {"name": "bob", "sha256": hash_key(BOB), "tier": "default"},
        ],
        "tiers": {"two-voices": {"max_voices": 2}, "default": {}},
    },
    "voices": {"aliases": {"nova": "house"}},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("voice-ownership"), 1, 1, time_scale=0.02, extra=EXTRA) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def upload(stack: Stack, headers: dict[str, str], name: str, path: str = "/v1/audio/voices", **form: str) -> httpx.Response:
    return httpx.post(
        f"{stack.url}{path}",
        data={"name": name, "consent": "true", **form},
        files={"audio_sample": (f"{name}.wav", reference_wav(), "audio/wav")},
        headers=headers,
        timeout=60,
    )


def listing(stack: Stack, key: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.url}/v1/audio/voices", headers=bearer(key), timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def uploaded(stack: Stack, key: str) -> set[str]:
    return {v["name"] for v in listing(stack, key)["uploaded_voices"]}


def speak(stack: Stack, key: str, voice: str) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/audio/speech", json=speech_body(voice=voice, response_format="pcm"), headers=bearer(key), timeout=60
    )


def worker_names(stack: Stack) -> list[set[str]]:
    return [
        {v["name"] for v in httpx.get(f"{p[0].url}/v1/audio/voices", timeout=10).json()["uploaded_voices"]}
        for p in stack.workers.values()
    ]


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return dict(error)


def test_a_key_cannot_list_read_use_or_delete_another_keys_voice(stack: Stack) -> None:
    made = upload(stack, bearer(ALICE), "alice-voice", consent=ALICE_CONSENT, ref_text=ALICE_TRANSCRIPT)
    assert made.status_code == 200, made.text
    assert made.json()["voice"]["consent"] == ALICE_CONSENT  # the owner reads her own record

    # Listing: nothing of Alice's, not her consent record, not her transcript.
    seen_by_bob = listing(stack, BOB)
    assert uploaded(stack, BOB) == set()
    assert "alice-voice" not in str(seen_by_bob)
    assert ALICE_CONSENT not in str(seen_by_bob) and ALICE_TRANSCRIPT not in str(seen_by_bob)
    assert uploaded(stack, ALICE) == {"alice-voice"}

    # Use: the same answer as a name nobody registered, listing none of Alice's names.
    refused = speak(stack, BOB, "alice-voice")
    error = assert_envelope(refused, 400, "voice_not_found")
    nobody = assert_envelope(speak(stack, BOB, "nobody-has-this"), 400, "voice_not_found")
    assert error["message"].replace("alice-voice", "X") == nobody["message"].replace("nobody-has-this", "X")
    assert speak(stack, ALICE, "alice-voice").status_code == 200

    # Delete: 404, and the voice is untouched.
    assert_envelope(httpx.delete(f"{stack.url}/v1/audio/voices/alice-voice", headers=bearer(BOB), timeout=30), 404, "voice_not_found")
    assert uploaded(stack, ALICE) == {"alice-voice"}
    assert speak(stack, ALICE, "alice-voice").status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/alice-voice", headers=bearer(ALICE), timeout=30).status_code == 200


def test_a_session_cannot_speak_with_another_keys_voice(stack: Stack) -> None:
    assert upload(stack, bearer(ALICE), "alice-session").status_code == 200
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    for key, fails in ((BOB, True), (ALICE, False)):
        with connect(url, max_size=None, additional_headers=bearer(key)) as ws:
            session = Session(ws)
            session.send("session.config", voice="alice-session", response_format="pcm", stream_audio=True)
            messages = session.utterance("Hello there.")
            kinds = [m["type"] if isinstance(m, dict) else "<audio>" for m in messages]
            errors = [m["message"] for m in messages if isinstance(m, dict) and m["type"] == "error"]
            if fails:
                assert errors and "<audio>" not in kinds, messages
                assert "alice-voice" not in " ".join(errors)  # none of Alice's other names
            else:
                assert not errors and "<audio>" in kinds, kinds
    assert httpx.delete(f"{stack.url}/v1/audio/voices/alice-session", headers=bearer(ALICE), timeout=30).status_code == 200


def test_two_keys_own_the_same_name_apart_on_every_worker(stack: Stack) -> None:
    assert upload(stack, bearer(ALICE), "narrator").status_code == 200
    bobs = upload(stack, bearer(BOB), "narrator")
    assert bobs.status_code == 200, bobs.text  # no 409: Bob never learns Alice has one
    for names in worker_names(stack):
        assert {f"_{ALICE_ID}.narrator", f"_{BOB_ID}.narrator"} <= names, names
    alice_audio, bob_audio = speak(stack, ALICE, "narrator"), speak(stack, BOB, "narrator")
    assert alice_audio.status_code == bob_audio.status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/narrator", headers=bearer(BOB), timeout=30).status_code == 200
    assert "narrator" in uploaded(stack, ALICE) and "narrator" not in uploaded(stack, BOB)
    for names in worker_names(stack):
        assert f"_{ALICE_ID}.narrator" in names and f"_{BOB_ID}.narrator" not in names, names
    assert speak(stack, ALICE, "narrator").status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/narrator", headers=bearer(ALICE), timeout=30).status_code == 200


def test_the_voice_quota_is_per_key(stack: Stack) -> None:
    assert uploaded(stack, ALICE) == set()
    for name in ("quota-one", "quota-two"):
        assert upload(stack, bearer(ALICE), name).status_code == 200
    over = upload(stack, bearer(ALICE), "quota-three")
    assert_envelope(over, 400, "too_many_voices")
    assert "alice" not in over.text.lower()  # not the key's name either, only "your tier"
    assert upload(stack, bearer(BOB), "quota-three").status_code == 200  # Bob's quota is his own
    for name in ("quota-one", "quota-two"):
        assert httpx.delete(f"{stack.url}/v1/audio/voices/{name}", headers=bearer(ALICE), timeout=30).status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/quota-three", headers=bearer(BOB), timeout=30).status_code == 200


def test_clients_see_no_worker_ids_the_admin_does(stack: Stack) -> None:
    made = upload(stack, bearer(BOB), "bob-counted")
    assert made.status_code == 200
    assert made.json()["workers"] == {"uploaded": 2}, made.json()
    assert "@" not in made.text and "low_latency" not in made.text
    deleted = httpx.delete(f"{stack.url}/v1/audio/voices/bob-counted", headers=bearer(BOB), timeout=30)
    assert deleted.json()["workers"] == {"deleted": 2}, deleted.json()

    house = upload(stack, ADMIN, "house", path="/admin/voices")
    assert house.status_code == 200, house.text
    assert set(house.json()["workers"].values()) == {"uploaded"} and all("@" in w for w in house.json()["workers"])
    # The admin's voice serves every key through its alias, never by its own name.
    for key in (ALICE, BOB):
        assert speak(stack, key, "nova").status_code == 200
        assert_envelope(speak(stack, key, "house"), 400, "voice_not_found")
        alias = next(v for v in listing(stack, key)["voices"] if v["id"] == "nova")
        assert alias["alias_of"] == "house" and alias["default_voice"] is False
    assert upload(stack, bearer(ALICE), "alice-kept").status_code == 200
    everyone = httpx.get(f"{stack.url}/admin/voices", headers=ADMIN, timeout=10).json()["voices"]
    owners = {(v["owner"], v["id"]) for v in everyone}
    assert {("admin", "house"), (ALICE_ID, "alice-kept")} <= owners, owners
    # Keys never reach the admin's API.
    assert httpx.get(f"{stack.url}/admin/voices", headers=bearer(ALICE), timeout=10).status_code == 401
    gone = httpx.delete(f"{stack.url}/admin/voices/{ALICE_ID}/alice-kept", headers=ADMIN, timeout=30)
    assert gone.status_code == 200 and all("@" in w for w in gone.json()["workers"]), gone.text
    assert "alice-kept" not in uploaded(stack, ALICE)
    assert httpx.delete(f"{stack.url}/admin/voices/admin/house", headers=ADMIN, timeout=30).status_code == 200


def test_logs_name_the_key_id_never_the_key(stack: Stack) -> None:
    assert upload(stack, bearer(ALICE), "alice-logged").status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/alice-logged", headers=bearer(ALICE), timeout=30).status_code == 200
    log = stack.gateway.log_path.read_text()
    assert f"voice registered: alice-logged of {ALICE_ID}" in log
    assert f"voice deleted: alice-logged of {ALICE_ID}" in log
    assert ALICE not in log and BOB not in log and hash_key(ALICE) not in log
