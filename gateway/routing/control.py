"""Routing control: the live policy and thresholds, as operators and other replicas change them.

``GET``/``PATCH /admin/routing`` read and change them here. Other gateway replicas' changes
arrive through ``follow_other_replicas`` (replicas sharing a data directory: the upkeep
loop polls the file) or ``follow_shared`` (a shared state store: its follower hands over
the stored overrides). Either way admission gets the new policy and a fresh look at its
queue, and the performance model its learning settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gateway.worker.profile import deep_merge
from gateway.errors import bad_request
from gateway.routing.admission import Admission
from gateway.routing.performance import PerformanceModel
from gateway.routing.policy import create_policy
from gateway.routing.prior import with_measured
from gateway.routing.thresholds import ThresholdStore, ThresholdUpdateError, effective_thresholds
from gateway.types import PoolName
from gateway.types.curve import Curve
from gateway.types.view import LoadView

log = logging.getLogger("higgs_gateway.routing")


class FleetLoads(Protocol):
    """The fleet's read model (``pools.view.FleetView``): loads now."""

    def snapshot(self) -> LoadView: ...


class RoutingMirror(Protocol):
    """The overrides every replica applies, kept in a shared store (raises to refuse a write).

    ``update`` gets the stored overrides and returns the ones to store; it may run more
    than once when another replica writes at the same moment.
    """

    name: str  # the store's kind, e.g. "redis": where the overrides really live

    async def update_routing(self, update: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]: ...


class RoutingControl:
    def __init__(
        self,
        thresholds: ThresholdStore,
        admission: Admission,
        fleet: FleetLoads,
        performance: PerformanceModel | None = None,
        profile_priors: Mapping[PoolName, Curve] | None = None,
        mirror: RoutingMirror | None = None,
    ) -> None:
        self._thresholds = thresholds
        self._admission = admission
        self._fleet = fleet
        self._performance = performance
        self._mirror = mirror
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
            # With a shared store the file is this replica's copy of what the store holds.
            "stored_in": self._mirror.name if self._mirror is not None else "file",
            "persisted_at": str(self._thresholds.path),
        }

    async def update(self, patch: dict[str, Any]) -> None:
        """Validate, persist and apply an operator's patch; a bad one is a 400, nothing changed.

        With a shared store the patch is merged into the stored overrides there first (a
        store that cannot be reached refuses it: ``StateUnavailable``, 503), then applied here.
        """
        before = self._thresholds.current()
        try:
            if self._mirror is None:
                after = self._thresholds.update(patch)
            else:
                await self._update_shared(patch)
                after = self._thresholds.current()
        except ThresholdUpdateError as exc:
            raise bad_request(str(exc), code="invalid_routing_config") from exc
        log.info("routing changed by operator: %s", patch, extra={"before": before.model_dump(), "after": after.model_dump()})
        self._apply(before.policy)

    async def _update_shared(self, patch: dict[str, Any]) -> None:
        assert self._mirror is not None

        def merged(stored: dict[str, Any]) -> dict[str, Any]:
            overrides = deep_merge(stored, dict(patch))
            self._thresholds.validated(overrides)  # ThresholdUpdateError: nothing written
            return overrides

        overrides = await self._mirror.update_routing(merged)
        # Applied in memory first (the next decision uses it); this replica's copy follows.
        self._thresholds.replace_overrides(overrides, persist=False)
        await asyncio.to_thread(self._thresholds.persist)

    def follow_other_replicas(self) -> None:
        before = self._thresholds.current()
        if self._thresholds.reload_if_changed():
            log.info("routing changed by another replica: %s", self._thresholds.current().model_dump())
            self._apply(before.policy)

    async def follow_shared(self, overrides: dict[str, Any]) -> bool:
        """Apply the overrides the shared store holds (written through another replica);
        True if the effective routing config changed."""
        if overrides == self._thresholds.overrides():
            return False
        before = self._thresholds.current()
        changed = self._thresholds.replace_overrides(overrides, persist=False)
        await asyncio.to_thread(self._thresholds.persist)
        if changed:
            log.info("routing changed through another replica: %s", self._thresholds.current().model_dump())
            self._apply(before.policy)
        return changed

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
