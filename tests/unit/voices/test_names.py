import pytest

from gateway.voices.errors import VoiceError
from gateway.voices.names import is_valid_name, validate_name


@pytest.mark.parametrize("name", ["a", "Bob", "narrator_2", "my.voice-v1", "0", "x" * 64])
def test_valid_names(name):
    assert is_valid_name(name)
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../etc", "a/b", "a\\b", ".hidden", "-flag", "_x", "x" * 65, "a b", "ünï", "a\n", "a\x00",
     "C:x", None, 3],  # fmt: skip
)
def test_invalid_names(name):
    assert not is_valid_name(name)
    with pytest.raises(VoiceError) as err:
        validate_name(name)
    assert err.value.param == "name" and err.value.status == 400


@pytest.mark.parametrize("name", ["default", "DEFAULT", "alloy", "Alloy", "narrator"])
def test_reserved_names(name):
    with pytest.raises(VoiceError, match="reserved"):
        validate_name(name, reserved=["alloy", "narrator"])
