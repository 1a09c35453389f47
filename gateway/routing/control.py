"""Routing control: the live policy and thresholds, as operators and other replicas change them.

``GET``/``PATCH /admin/routing`` read and change them here; the replica upkeep loop calls
``follow_other_replicas`` so a change made through another gateway replica applies here
too. Either way admission gets the new policy and a fresh look at its queue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.errors import bad_request
from gateway.pools.fleet import Fleet
from gateway.routing.admission import Admission
from gateway.routing.curves import Curve
from gateway.routing.performance import PerformanceModel
from gateway.routing.prior import with_measured
from gateway.types import PoolName
from gateway.routing.policy import create_policy
from gateway.routing.thresholds import ThresholdStore, ThresholdUpdateError, effective_thresholds

log = logging.getLogger("higgs_gateway.routing")


class RoutingControl:
    def __init__(
        self,
        thresholds: ThresholdStore,
        admission: Admission,
        fleet: Fleet,
        performance: PerformanceModel | None = None,
        profile_priors: Mapping[PoolName, Curve] | None = None,
    ) -> None:
        self._thresholds = thresholds
        self._admission = admission
        self._fleet = fleet
        self._performance = performance
        self._profile_priors = dict(profile_priors or {})  # what `routing.measured` corrects
        self._measured = thresholds.current().measured
        if performance is not None and self._measured:
            performance.set_priors(with_measured(self._profile_priors, self._measured))

    def status(self) -> dict[str, Any]:
        current = self._thresholds.current()
        return {
            "policy": current.policy,
            "thresholds": current.thresholds.model_dump(mode="json"),
            "learning": current.learning.model_dump(),
            "measured": {pool.value: curve.model_dump() for pool, curve in current.measured.items()},
            "effective": effective_thresholds(current.thresholds, self._fleet.snapshot()),
            "persisted_at": str(self._thresholds.path),
        }

    def update(self, patch: dict[str, Any]) -> None:
        """Validate, persist and apply an operator's patch; a bad one is a 400, nothing changed."""
        before = self._thresholds.current()
        try:
            after = self._thresholds.update(patch)
        except ThresholdUpdateError as exc:
            raise bad_request(str(exc), code="invalid_routing_config") from exc
        log.info("routing changed by operator: %s", patch, extra={"before": before.model_dump(), "after": after.model_dump()})
        self._apply(before.policy)

    def follow_other_replicas(self) -> None:
        before = self._thresholds.current()
        if self._thresholds.reload_if_changed():
            log.info("routing changed by another replica: %s", self._thresholds.current().model_dump())
            self._apply(before.policy)

    def _apply(self, policy_before: str) -> None:
        current = self._thresholds.current()
        if current.policy != policy_before:
            self._admission.set_policy(create_policy(current.policy))
        if self._performance is not None:
            if self._performance.settings != current.learning:
                self._performance.configure(current.learning)
            if current.measured != self._measured:
                self._measured = current.measured
                self._performance.set_priors(with_measured(self._profile_priors, current.measured))
        # Caps and ceilings apply to the next decision: wake the queue to look again.
        self._admission.capacity_changed()
