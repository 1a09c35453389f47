"""The SLA headers: which class a request belongs to, its optional TTFP budget and, where
the operator allows it, the pool it is pinned to."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers

from gateway.errors import bad_request
from gateway.types import PIN_POOL_HEADER, SLA_CLASS_HEADER, SLA_TTFP_HEADER, PoolName, SlaClass

MAX_TTFP_BUDGET_MS = 600_000.0
_CLASSES = {c.value: c for c in SlaClass}
_POOLS = {p.value: p for p in PoolName}


@dataclass(frozen=True, slots=True)
class SlaRequest:
    sla_class: SlaClass
    ttfp_budget_ms: float | None
    pool_pin: PoolName | None = None


def sla_class_or_default(headers: Headers) -> SlaClass:
    """The request's class for a metric label, never raising: balanced when absent or invalid."""
    raw = headers.get(SLA_CLASS_HEADER)
    return SlaClass.BALANCED if raw is None else _CLASSES.get(raw.strip().lower(), SlaClass.BALANCED)


def parse_sla_headers(headers: Headers, allow_pool_pin: bool = False) -> SlaRequest:
    raw_class = headers.get(SLA_CLASS_HEADER)
    if raw_class is None:
        sla_class = SlaClass.BALANCED
    else:
        found = _CLASSES.get(raw_class.strip().lower())
        if found is None:
            raise bad_request(
                f"Header {SLA_CLASS_HEADER} must be one of latency, balanced, throughput.",
                SLA_CLASS_HEADER,
                code="invalid_sla_class",
            )
        sla_class = found
    raw_budget = headers.get(SLA_TTFP_HEADER)
    budget: float | None = None
    if raw_budget is not None:
        try:
            budget = float(raw_budget)
        except ValueError:
            budget = -1.0
        if not 0 < budget <= MAX_TTFP_BUDGET_MS:
            raise bad_request(
                f"Header {SLA_TTFP_HEADER} must be a number of milliseconds between 0 and {MAX_TTFP_BUDGET_MS:.0f}.",
                SLA_TTFP_HEADER,
                code="invalid_sla_ttfp",
            )
    return SlaRequest(sla_class, budget, _pool_pin(headers.get(PIN_POOL_HEADER), allow_pool_pin))


def _pool_pin(raw: str | None, allowed: bool) -> PoolName | None:
    if raw is None:
        return None
    if not allowed:
        # Refused, not ignored: a client that pins expects its pool, and silence would hide
        # that this gateway routes by class.
        raise bad_request(
            f"Header {PIN_POOL_HEADER} is not accepted here: this gateway routes by class "
            "(an operator may allow pinning with routing.allow_pool_pin).",
            PIN_POOL_HEADER,
            code="pool_pin_not_allowed",
        )
    pool = _POOLS.get(raw.strip().lower())
    if pool is None:
        raise bad_request(
            f"Header {PIN_POOL_HEADER} must be one of {', '.join(_POOLS)}.", PIN_POOL_HEADER, code="invalid_pool_pin"
        )
    return pool
