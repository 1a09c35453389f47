import pytest

from gateway.api.request_id import incoming_request_id


@pytest.mark.parametrize("value", ["abc-123", "req_01HZX.9:a/b+c=d@e~f", "x" * 128])
def test_plain_request_ids_are_echoed(value):
    assert incoming_request_id(_scope(value)) == value


@pytest.mark.parametrize(
    "value",
    [None, "", "a b", "a\r\nSet-Cookie: x=1", "a\x00", "a\tb", "x" * 129, "ünï", '"quoted"', "a\x7f", "a\u0085b"],
)
def test_unsafe_request_ids_are_replaced_not_cleaned(value):
    replaced = incoming_request_id(_scope(value))
    assert replaced != value and len(replaced) == 32


def test_default_ids_are_fresh():
    assert incoming_request_id(_scope(None)) != incoming_request_id(_scope(None))


def _scope(request_id: str | None) -> dict[str, object]:
    headers = [] if request_id is None else [(b"x-request-id", request_id.encode("utf-8"))]
    return {"type": "http", "headers": headers}
