"""The SLA headers: which class a request belongs to and its optional TTFP budget."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers

from gateway.errors import bad_request
from gateway.types import SLA_CLASS_HEADER, SLA_TTFP_HEADER, SlaClass

MAX_TTFP_BUDGET_MS = 600_000.0
_CLASSES = {c.value: c for c in SlaClass}


@dataclass(frozen=True, slots=True)
class SlaRequest:
    sla_class: SlaClass
    ttfp_budget_ms: float | None


def sla_class_or_default(headers: Headers) -> SlaClass:
    """The request's class for a metric label, never raising: balanced when absent or invalid."""
    raw = headers.get(SLA_CLASS_HEADER)
    return SlaClass.BALANCED if raw is None else _CLASSES.get(raw.strip().lower(), SlaClass.BALANCED)


def parse_sla_headers(headers: Headers) -> SlaRequest:
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
    return SlaRequest(sla_class, budget)
