import pytest

from gateway.config import VoicesConfig
from gateway.voices.errors import VoiceError
from gateway.voices.owners import ADMIN
from gateway.voices.resolve import list_voices, resolve_voice
from gateway.voices.store import VoiceStore
from tests.unit.voices.samples import wav_bytes

CONFIG = VoicesConfig(
    aliases={"nova": "Narrator", "echo": None, "shimmer": "deleted-voice", "boss": "narrator"}
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = VoiceStore.in_data_dir(tmp_path_factory.mktemp("data"), CONFIG)
    store.add("Narrator", wav_bytes(), consent="true", ref_text="Hello.")
    store.add("kid", wav_bytes(), consent="true")
    return store


@pytest.mark.parametrize(
    "requested, expected",
    [
        (None, None),
        ("default", None),
        ("DeFault", None),
        ("", None),
        ("Narrator", "Narrator"),
        ("narrator", "Narrator"),  # workers match names case-insensitively
        ({"id": "kid"}, "kid"),
        ({"id": "default"}, None),
        ("nova", "Narrator"),  # alias to a registered voice
        ("NOVA", "Narrator"),
        ("boss", "Narrator"),  # aliases need not be OpenAI names
        ("echo", None),  # alias to null: the default voice
        ("shimmer", None),  # alias whose voice is gone: degrade to default, never fail
        ("alloy", None),  # unmapped OpenAI name: default voice
        ({"id": "Alloy"}, None),
    ],
)
def test_resolution_table(store, requested, expected):
    assert resolve_voice(requested, CONFIG, store, owner=ADMIN) == expected


@pytest.mark.parametrize(
    "requested", ["bob", "../kid", {"id": "bob"}, {"name": "kid"}, {"id": 3}, 42, ["kid"]]
)
def test_unknown_voices_are_a_clear_400(store, requested):
    with pytest.raises(VoiceError) as err:
        resolve_voice(requested, CONFIG, store, owner=ADMIN)
    assert err.value.status == 400 and err.value.param == "voice"
    assert err.value.envelope()["error"]["type"] == "invalid_request_error"


def test_unknown_voice_message_says_how_to_fix_it(store):
    with pytest.raises(VoiceError) as err:
        resolve_voice("bob", CONFIG, store, owner=ADMIN)
    message = err.value.message
    assert "'bob'" in message and "kid" in message and "alloy" in message
    assert "POST /v1/audio/voices" in message


def test_listing_for_clients(store):
    body = list_voices(CONFIG, store, owner=ADMIN)
    by_id = {v["id"]: v for v in body["voices"]}
    assert all({"id", "name"} <= v.keys() for v in body["voices"])
    assert by_id["default"]["type"] == "default"
    assert by_id["Narrator"]["type"] == "uploaded" and by_id["Narrator"]["ref_text"] == "Hello."
    assert by_id["nova"] == {
        "id": "nova", "name": "nova", "type": "alias", "alias_of": "Narrator", "default_voice": False
    }  # fmt: skip
    assert by_id["alloy"]["alias_of"] == "default" and by_id["alloy"]["default_voice"] is True
    assert by_id["shimmer"]["default_voice"] is True
    assert by_id["boss"]["alias_of"] == "Narrator"
    assert len(body["voices"]) == len(by_id)  # no duplicates
    assert [v["name"] for v in body["uploaded_voices"]] == ["kid", "Narrator"]
    assert all("path" not in str(v) for v in body["uploaded_voices"])


KEY_A, KEY_B = "0123456789ab", "ba9876543210"


@pytest.fixture()
def shared(tmp_path):
    """The admin's Narrator, key A's own Narrator and its secret, key B's nothing."""
    store = VoiceStore.in_data_dir(tmp_path, CONFIG)
    store.add("Narrator", wav_bytes(), consent="true")
    store.add("narrator", wav_bytes(), consent="rec-a", owner=KEY_A)
    store.add("secret-a", wav_bytes(), consent="rec-a", ref_text="A's transcript.", owner=KEY_A)
    return store


def test_a_key_resolves_its_own_voices_and_never_another_owners(shared):
    assert resolve_voice("secret-a", CONFIG, shared, owner=KEY_A) == f"_{KEY_A}.secret-a"
    assert resolve_voice("narrator", CONFIG, shared, owner=KEY_A) == f"_{KEY_A}.narrator"
    for other in (KEY_B,):
        with pytest.raises(VoiceError) as err:
            resolve_voice("secret-a", CONFIG, shared, owner=other)
        assert err.value.code == "voice_not_found"
        # No other owner's name is listed, and nothing says the name exists.
        assert "narrator" not in err.value.message.lower() and "registered voice (" not in err.value.message
    # The admin's voices are not every key's either: only through an alias.
    with pytest.raises(VoiceError):
        resolve_voice("Narrator", CONFIG, shared, owner=KEY_B)
    # A worker name typed by a client names nothing.
    with pytest.raises(VoiceError):
        resolve_voice(f"_{KEY_A}.secret-a", CONFIG, shared, owner=KEY_B)


def test_an_alias_names_the_admins_voice_first_then_the_callers(shared):
    assert resolve_voice("nova", CONFIG, shared, owner=KEY_B) == "Narrator"  # the admin's
    assert resolve_voice("nova", CONFIG, shared, owner=KEY_A) == "Narrator"  # operator intent first
    shared.delete("Narrator")
    assert resolve_voice("nova", CONFIG, shared, owner=KEY_A) == f"_{KEY_A}.narrator"  # then the caller's own
    assert resolve_voice("nova", CONFIG, shared, owner=KEY_B) is None  # never another key's


def test_a_listing_shows_only_the_callers_voices(shared):
    for owner, names in ((KEY_A, ["narrator", "secret-a"]), (KEY_B, []), (ADMIN, ["Narrator"])):
        body = list_voices(CONFIG, shared, owner=owner)
        assert [v["name"] for v in body["uploaded_voices"]] == names
        assert "A's transcript." not in str(body) or owner == KEY_A
        assert "_" + KEY_A not in str(body)  # worker names stay inside
