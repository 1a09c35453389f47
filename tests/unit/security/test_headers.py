import pytest

from gateway.security.headers import check_header_value, clean_request_id, has_control_chars


@pytest.mark.parametrize("value", ["abc-123", "req_01HZX.9:a/b+c=d@e~f", "x" * 128])
def test_plain_request_ids_are_echoed(value):
    assert clean_request_id(value, new_id=lambda: "NEW") == value


@pytest.mark.parametrize(
    "value",
    [None, "", "a b", "a\r\nSet-Cookie: x=1", "a\x00", "a\tb", "x" * 129, "ünï", '"quoted"', "a\x7f", "a\u0085b"],
)
def test_unsafe_request_ids_are_replaced_not_cleaned(value):
    assert clean_request_id(value, new_id=lambda: "NEW") == "NEW"


def test_default_ids_are_fresh():
    assert clean_request_id(None) != clean_request_id(None)


@pytest.mark.parametrize(
    "value, bad", [("ok value", False), ("a\nb", True), ("a\rb", True), ("\x1b[31m", True), ("é", False)]
)
def test_control_characters(value, bad):
    assert has_control_chars(value) is bad
    if bad:
        with pytest.raises(ValueError):
            check_header_value(value, "x-request-id")
    else:
        assert check_header_value(value) == value
