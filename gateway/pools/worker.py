"""One worker as the gateway sees it: its life-cycle state, its load, its failures.

The ``Worker`` is plain mutable state owned by the fleet; every transition goes through
``set_state`` so it is logged once and the fleet can wake the admission queue.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.pools.report_leak import LeakWatch
from gateway.types import PoolName, WorkerState
from gateway.types.view import WorkerLoad

log = logging.getLogger("higgs_gateway.workers")


class LoadSource(StrEnum):
    """Where the worker's own load report comes from."""

    LOAD = "load"  # GET /load (--enable-server-load-tracking)
    METRICS = "metrics"  # GET /metrics: /load turned out not to count


@dataclass(eq=False)
class Worker:
    worker_id: str
    pool: PoolName
    url: str  # base URL, no trailing slash
    slots: int
    managed: bool = False  # launched by our supervisor (vs static or discovered)
    state: WorkerState = WorkerState.STARTING
    drained: bool = False  # operator drain: survives state changes until undrained
    # Leaving its pool (a profile change): no new requests while in-flight ones finish.
    # Not an operator drain: never persisted, never shared with other replicas.
    retiring: bool = False
    inflight: int = 0  # this gateway's leases; changed only by Lease
    reported_load: int | None = None  # the worker's own running+waiting
    reported_at: float | None = None  # monotonic time of the last good report
    inflight_at_report: int = 0  # our own in-flight when the last report arrived
    load_source: LoadSource = LoadSource.LOAD
    # When our latest leases ended (clock times), for reports that still count them.
    recent_releases: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    consecutive_failures: int = 0
    # It took a request and failed it (a 500, a cut or empty stream) since its last success:
    # a refused connection now means the process stopped listening (engine death), not a blip.
    failed_after_arrival: bool = False
    answered: bool = False  # answered /health since it (re)started
    ejected_at: float | None = None
    last_error: str | None = None
    state_since: float = 0.0
    # The worker process's start (its ``process_start_time_seconds``, Unix time): a new
    # value means the process was replaced behind the same address (see pools/restarts.py).
    process_start_time: float | None = None
    restarts: int = 0  # restarts noticed by this gateway
    # Other gateway replicas' leases on this worker as the shared fleet view knows them
    # (exact, milliseconds old); None while there is no fleet view (local backend, or the
    # shared store unreachable): then the worker's own report stands in for them.
    others: int | None = None
    # Requests the worker's report keeps counting that no replica holds (its /load leaked
    # them), learned while the fleet view was exact (pools/report_leak.py); subtracted from
    # its reports, which are not trusted as they stand while this is above 0.
    report_leak: int = 0
    leak_watch: LeakWatch = field(default_factory=LeakWatch)
    # Its audio quality as the sampler heard it (gateway.quality.judge): recent verdicts, the
    # failures and the evidence of its last quality ejection. None until a stream was scored.
    quality: dict[str, object] | None = None

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def routable(self) -> bool:
        return self.state is WorkerState.READY and not self.drained and not self.retiring

    def set_state(self, state: WorkerState, now: float, why: str = "") -> bool:
        """Move to ``state``; returns False when it was already there."""
        if state is self.state:
            return False
        log.info(
            "worker %s: %s -> %s%s",
            self.worker_id,
            self.state.value,
            state.value,
            f" ({why})" if why else "",
            extra={"worker": self.worker_id, "pool": self.pool.value, "from": self.state.value, "to": state.value},
        )
        self.state = state
        self.state_since = now
        if state is WorkerState.EJECTED:
            self.ejected_at = now
        return True

    def fresh_report(self, now: float, stale_after_s: float) -> int | None:
        """The worker's load as of now: what others (other gateway replicas) had on it at
        the last report, plus our own exact in-flight. Adding only our leases taken since
        the report (and never our releases) kept requests that had already finished in the
        count until the next report: a closed-loop client at concurrency 3 then saw the
        fleet at the balanced threshold and was sent to high-throughput."""
        if self.reported_at is None or self.reported_load is None or now - self.reported_at > stale_after_s:
            return None
        others = max(0, self.reported_load - self.report_leak - self.inflight_at_report)
        return others + self.inflight

    def fleet_load(self) -> int | None:
        """Every replica's leases here, exact, while the fleet view is shared; else None."""
        return None if self.others is None else self.inflight + self.others

    def note_release(self, now: float) -> None:
        self.recent_releases.append(now)

    def releases_since(self, since: float) -> int:
        return sum(1 for at in self.recent_releases if at >= since)

    def record_report(self, load: int, now: float, ours: int | None = None) -> None:
        """``ours``: how many of the reported requests are this gateway's (default: now)."""
        self.reported_load = load
        self.reported_at = now
        self.inflight_at_report = self.inflight if ours is None else ours
        if self.others is not None:
            # The fleet's count is exact: what the report has beyond it is lag or a leak.
            leak = self.leak_watch.observe(now, load - self.inflight_at_report - self.others)
            if leak != self.report_leak:
                if leak:
                    log.warning(
                        "worker %s: its load report counts %d request(s) no gateway holds (a leaking counter);"
                        " its reports are corrected by that",
                        self.worker_id,
                        leak,
                        extra={"worker": self.worker_id, "pool": self.pool.value, "leak": leak},
                    )
                else:
                    log.info("worker %s: its load report agrees with the fleet again", self.worker_id)
                self.report_leak = leak

    def load_view(self, now: float, stale_after_s: float) -> WorkerLoad:
        return WorkerLoad(
            worker_id=self.worker_id,
            pool=self.pool,
            routable=self.routable,
            inflight=self.inflight,
            # The fleet's exact count when it is shared: the report then only tells leaks apart.
            reported=self.fresh_report(now, stale_after_s) if self.others is None else self.inflight + self.others,
            slots=self.slots,
        )

    def describe(self, now: float, stale_after_s: float) -> dict[str, object]:
        """What ``GET /admin/pools`` shows for this worker."""
        return {
            "id": self.worker_id,
            "pool": self.pool.value,
            "url": self.url,
            "state": self.state.value,
            "drained": self.drained,
            "retiring": self.retiring,
            "routable": self.routable,
            "managed": self.managed,
            "inflight": self.inflight,
            "reported_load": self.reported_load,
            "report_age_s": None if self.reported_at is None else round(now - self.reported_at, 3),
            "report_fresh": self.fresh_report(now, stale_after_s) is not None,
            "load_source": self.load_source.value,
            "other_replicas_inflight": self.others,
            "report_leak": self.report_leak,
            "report_trusted": self.report_leak == 0,
            "slots": self.slots,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "state_for_s": round(now - self.state_since, 3),
            "restarts": self.restarts,
            "quality": self.quality,
        }
