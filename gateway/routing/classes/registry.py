"""The SLA classes a client names, each with its rules: the one table the adaptive policy
plans from and admission reads a queued request's spill and promotion rules from."""

from __future__ import annotations

from gateway.routing.classes import SlaRules, balanced, latency, throughput
from gateway.types import SlaClass

CLASSES: dict[SlaClass, SlaRules] = {rules.sla: rules for rules in (latency.RULES, balanced.RULES, throughput.RULES)}
