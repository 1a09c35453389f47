"""The SLA headers, and the pool pin an operator may allow (the demo's Compare)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from gateway.api.sla import parse_sla_headers
from gateway.errors import GatewayError
from gateway.types import PIN_POOL_HEADER, PoolName, SlaClass


def test_a_pin_is_honoured_where_allowed() -> None:
    sla = parse_sla_headers(Headers({"x-sla-class": "throughput", PIN_POOL_HEADER: "High_Throughput"}), allow_pool_pin=True)
    assert (sla.sla_class, sla.pool_pin) == (SlaClass.THROUGHPUT, PoolName.HIGH_THROUGHPUT)
    assert parse_sla_headers(Headers({}), allow_pool_pin=True).pool_pin is None


def test_a_pin_is_refused_by_name_where_not_allowed() -> None:
    # Refused rather than ignored: the client would otherwise believe it got the pool it named.
    with pytest.raises(GatewayError) as caught:
        parse_sla_headers(Headers({PIN_POOL_HEADER: "low_latency"}))
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "pool_pin_not_allowed", PIN_POOL_HEADER)
    assert "routing.allow_pool_pin" in caught.value.message


def test_an_unknown_pool_is_a_400_listing_the_pools() -> None:
    with pytest.raises(GatewayError) as caught:
        parse_sla_headers(Headers({PIN_POOL_HEADER: "gpu-7"}), allow_pool_pin=True)
    assert caught.value.code == "invalid_pool_pin" and "low_latency, high_throughput" in caught.value.message
