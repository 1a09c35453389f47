"""What the routing policy sees: the request and every worker at one instant.

The pools build a ``LoadView`` snapshot per decision; the policy turns (``RequestInfo``,
``LoadView``, thresholds) into a ``types.decision.Decision``. Keeping both sides as
frozen data is what lets the policy be a pure function with table-driven tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gateway.types import PoolName, SlaClass
from gateway.types.curve import Curve


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """The request as routing sees it: never the text itself, only its length."""

    sla_class: SlaClass
    ttfp_budget_ms: float | None
    input_chars: int
    # Set by admission once a latency request has spent its queueing budget waiting for a
    # low-latency slot: from then on the policy may spill it to high-throughput.
    waited_out: bool = False
    # A retry after a failed first byte: the workers it already tried (never chosen again).
    tried: frozenset[str] = frozenset()
    # A later sentence of a voice session: seconds from now until a real-time player reaches
    # it (negative: it is already late). Routed by the `deadline` rules, not by its class's.
    deadline_s: float | None = None
    # The pool the client pinned (x-gateway-pin-pool, where allowed): routed by the `pinned`
    # rules, inside that pool only, whatever its class.
    pool_pin: PoolName | None = None
    # Voice affinity: the workers that probably hold this request's encoded reference (its
    # uploaded voice or ref_audio), inferred by the gateway from where it sent it last
    # (``pools.affinity``). Preferred unless another worker's score, plus the encode it
    # would do first, is clearly better.
    warm_workers: frozenset[str] = frozenset()
    # The length (seconds) of that reference clip when the gateway knows it (an uploaded
    # voice's, an inline WAV's header): what a worker without its codes must encode first.
    # None: no reference, or one of unknown length (a URL).
    reference_s: float | None = None
    # The gateway's own time from the worker's first chunk to the first encoded byte for this
    # request's format and speed (``audio.delay``): the client's TTFP is the worker's plus this.
    gateway_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker at the instant of the decision."""

    worker_id: str
    pool: PoolName
    routable: bool  # ready, not draining, ejected or starting
    inflight: int  # this gateway's own leases: exact
    reported: int | None  # the worker's own running+waiting; None when missing or stale
    slots: int  # how many requests this worker should carry at once (a hard cap for `adaptive`)
    curve: Curve | None = None  # its learned performance by load (None: the policy cannot predict it)
    # The larger of the two: the worker's report also counts other gateway replicas'
    # requests, our own count is exact and never lags behind our newest lease. Computed
    # once: the policy reads it for every worker on every decision.
    load: int = field(init=False)
    # The hard cap a predicting policy never passes: the operator's slots, and never more
    # than the engine runs at once (its curve's max_num_seqs). The one place it is written.
    cap: int = field(init=False)

    def __post_init__(self) -> None:
        reported, inflight, slots, curve = self.reported, self.inflight, self.slots, self.curve
        object.__setattr__(self, "load", inflight if reported is None or reported < inflight else reported)
        cap = slots if curve is None else (min(slots, curve.max_load) if slots > 0 else curve.max_load)
        object.__setattr__(self, "cap", cap)

    @property
    def free(self) -> int:
        return max(0, self.slots - self.load)


@dataclass(frozen=True, slots=True)
class LoadView:
    """Every worker of both pools at one instant."""

    workers: tuple[WorkerLoad, ...]
    # Places per low-latency worker the observed `latency` traffic needs, as the performance
    # model last published it (``routing.reserve``); None: not estimated (the reserve is fixed).
    latency_places: int | None = None

    def pool(self, pool: PoolName) -> tuple[WorkerLoad, ...]:
        return tuple(w for w in self.workers if w.pool == pool)

    def routable(self, pool: PoolName) -> tuple[WorkerLoad, ...]:
        return tuple(w for w in self.workers if w.pool == pool and w.routable)

    def capacity(self, pool: PoolName) -> int:
        return sum(w.slots for w in self.routable(pool))

    def load(self, pool: PoolName) -> int:
        return sum(w.load for w in self.pool(pool))

    def free(self, pool: PoolName) -> int:
        return sum(w.free for w in self.routable(pool))

    def fleet_load(self) -> int:
        return sum(w.load for w in self.workers)

    def has_workers(self, pool: PoolName) -> bool:
        return any(w.pool == pool and w.routable for w in self.workers)

    def with_leases(self, leases: Mapping[str, int]) -> LoadView:
        """This view as if ``leases[worker_id]`` more requests were already running there.

        Admission uses it within one serve pass, for slots it reserved after taking the view.
        Both counts grow, so ``load`` grows even when the worker's report dominates.
        """
        if not leases:
            return self
        return LoadView(tuple(_with_extra(w, leases.get(w.worker_id, 0)) for w in self.workers), self.latency_places)


def _with_extra(worker: WorkerLoad, extra: int) -> WorkerLoad:
    if extra == 0:
        return worker
    reported = None if worker.reported is None else worker.reported + extra
    return replace(worker, inflight=worker.inflight + extra, reported=reported)
