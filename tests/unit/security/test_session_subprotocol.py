"""Security, WebSocket handshake: the subprotocol answered never carries the key.

A browser sends its key as the subprotocol ``bearer.<key>``; the server's answer must be one
of the offered subprotocols, and answers are visible to every proxy and browser tool on the
way. So the gateway answers ``higgs-gateway`` (offered alongside) and refuses a handshake that
offers only the key, instead of echoing it.
"""

from __future__ import annotations

import pytest

from gateway.api.session_entry import SUBPROTOCOL, _authorization, _chosen
from gateway.errors import GatewayError

KEY = "sk-subprotocol-9c2e51f0a7d3b6e4"


def test_the_fixed_name_is_answered_when_offered_with_the_key() -> None:
    offered = [f"bearer.{KEY}", SUBPROTOCOL]
    assert _chosen(offered) == SUBPROTOCOL
    assert _authorization(None, offered, None) == f"Bearer {KEY}"


def test_a_key_offered_alone_is_refused_not_echoed() -> None:
    with pytest.raises(GatewayError) as refused:
        _chosen([f"bearer.{KEY}"])
    assert refused.value.status == 400 and refused.value.code == "subprotocol_required"
    assert KEY not in refused.value.message and SUBPROTOCOL in refused.value.message


def test_other_subprotocols_are_still_answered_but_never_a_bearer_one() -> None:
    assert _chosen([f"bearer.{KEY}", "chat"]) == "chat"
    assert _chosen([]) is None
