"""One worker as the gateway sees it: its life-cycle state, its load, its failures.

The ``Worker`` is mutable state owned by the fleet, and changed only through its own
methods: its fields are read-only properties over private slots, so a module that wants
a worker to change says why (``eject``, ``mark_ready``, ``record_report``, ...) and the
fields that belong together (a state and when it began, an ejection and its time, a
restart and the reports it voids) change together. Every state change goes through
``set_state`` so it is logged once.
"""

from __future__ import annotations

import logging
from collections import deque
from enum import StrEnum

from gateway.pools.report_leak import LeakWatch
from gateway.types import PoolName, WorkerState
from gateway.types.view import WorkerLoad

log = logging.getLogger("higgs_gateway.workers")


class LoadSource(StrEnum):
    """Where the worker's own load report comes from."""

    LOAD = "load"  # GET /load (--enable-server-load-tracking)
    METRICS = "metrics"  # GET /metrics: /load turned out not to count


class Worker:
    __slots__ = (
        "_worker_id",
        "_pool",
        "_url",
        "_slots",
        "_managed",
        "_state",
        "_state_since",
        "_ejected_at",
        "_drained",
        "_retiring",
        "_inflight",
        "_reported_load",
        "_reported_at",
        "_inflight_at_report",
        "_load_source",
        "_recent_releases",
        "_consecutive_failures",
        "_failed_after_arrival",
        "_answered",
        "_last_error",
        "_process_start_time",
        "_restarts",
        "_others",
        "_report_leak",
        "_leak_watch",
        "_quality",
    )

    def __init__(
        self,
        worker_id: str,
        pool: PoolName,
        url: str,  # base URL, no trailing slash
        slots: int,
        managed: bool = False,  # launched by our supervisor (vs static or discovered)
        *,
        state: WorkerState = WorkerState.STARTING,
        state_since: float = 0.0,
        drained: bool = False,
        restarts: int = 0,  # restarts behind this id before this object (a new address)
    ) -> None:
        self._worker_id = worker_id
        self._pool = pool
        self._url = url
        self._slots = slots
        self._managed = managed
        self._state = state
        self._state_since = state_since
        self._ejected_at: float | None = None
        # Operator drain: survives state changes until undrained.
        self._drained = drained
        # Leaving its pool (a profile change): no new requests while in-flight ones finish.
        # Not an operator drain: never persisted, never shared with other replicas.
        self._retiring = False
        self._inflight = 0  # this gateway's leases; changed only by Lease
        self._reported_load: int | None = None  # the worker's own running+waiting
        self._reported_at: float | None = None  # monotonic time of the last good report
        self._inflight_at_report = 0  # our own in-flight when the last report arrived
        self._load_source = LoadSource.LOAD
        # When our latest leases ended (clock times), for reports that still count them.
        self._recent_releases: deque[float] = deque(maxlen=256)
        self._consecutive_failures = 0
        # It took a request and failed it (a 500, a cut or empty stream) since its last success:
        # a refused connection now means the process stopped listening (engine death), not a blip.
        self._failed_after_arrival = False
        self._answered = False  # answered /health since it (re)started
        self._last_error: str | None = None
        # The worker process's start (its ``process_start_time_seconds``, Unix time): a new
        # value means the process was replaced behind the same address (see pools/restarts.py).
        self._process_start_time: float | None = None
        self._restarts = restarts  # restarts noticed by this gateway
        # Other gateway replicas' leases on this worker as the shared fleet view knows them
        # (exact, milliseconds old); None while there is no fleet view (local backend, or the
        # shared store unreachable): then the worker's own report stands in for them.
        self._others: int | None = None
        # Requests the worker's report keeps counting that no replica holds (its /load leaked
        # them), learned while the fleet view was exact (pools/report_leak.py); subtracted from
        # its reports, which are not trusted as they stand while this is above 0.
        self._report_leak = 0
        self._leak_watch = LeakWatch()
        # Its audio quality as the sampler heard it (gateway.quality.judge): recent verdicts, the
        # failures and the evidence of its last quality ejection. None until a stream was scored.
        self._quality: dict[str, object] | None = None

    def __repr__(self) -> str:
        return f"Worker({self._worker_id!r}, {self._pool.value}, {self._url!r}, {self._state.value}, inflight={self._inflight})"

    # ---- read-only fields ------------------------------------------------------------
    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def pool(self) -> PoolName:
        return self._pool

    @property
    def url(self) -> str:
        return self._url

    @property
    def base_url(self) -> str:
        return self._url

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def managed(self) -> bool:
        return self._managed

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def state_since(self) -> float:
        return self._state_since

    @property
    def ejected_at(self) -> float | None:
        """When it was ejected, or when its half-open wait last started again."""
        return self._ejected_at

    @property
    def drained(self) -> bool:
        return self._drained

    @property
    def retiring(self) -> bool:
        return self._retiring

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def reported_load(self) -> int | None:
        return self._reported_load

    @property
    def reported_at(self) -> float | None:
        return self._reported_at

    @property
    def inflight_at_report(self) -> int:
        return self._inflight_at_report

    @property
    def load_source(self) -> LoadSource:
        return self._load_source

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive_failures

    @property
    def failed_after_arrival(self) -> bool:
        return self._failed_after_arrival

    @property
    def answered(self) -> bool:
        return self._answered

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def process_start_time(self) -> float | None:
        return self._process_start_time

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def others(self) -> int | None:
        return self._others

    @property
    def report_leak(self) -> int:
        return self._report_leak

    @property
    def quality(self) -> dict[str, object] | None:
        """The record itself, not a copy (every /admin/pools read would pay for one): read it,
        change it through ``record_quality`` and ``note_quality``."""
        return self._quality

    @property
    def routable(self) -> bool:
        return self._state is WorkerState.READY and not self._drained and not self._retiring

    # ---- life cycle --------------------------------------------------------------------
    def set_state(self, state: WorkerState, now: float, why: str = "") -> bool:
        """Move to ``state``; returns False when it was already there."""
        if state is self._state:
            return False
        log.info(
            "worker %s: %s -> %s%s",
            self._worker_id,
            self._state.value,
            state.value,
            f" ({why})" if why else "",
            extra={"worker": self._worker_id, "pool": self._pool.value, "from": self._state.value, "to": state.value},
        )
        self._state = state
        self._state_since = now
        if state is WorkerState.EJECTED:
            self._ejected_at = now
        return True

    def mark_ready(self, now: float, why: str) -> bool:
        """Healthy and prepared: routable, with a clean failure record."""
        self._consecutive_failures = 0
        self._failed_after_arrival = False
        return self.set_state(WorkerState.READY, now, why)

    def eject(self, reason: str, detail: str, now: float) -> bool:
        """Out of routing now, if it was routable; the reason is kept as its last error either way."""
        self._last_error = f"{reason}: {detail}"
        return self._state is WorkerState.READY and self.set_state(WorkerState.EJECTED, now, reason)

    def count_failure(self, reason: str, eject_after: int, now: float) -> bool:
        """One more failure in a row; ejected (True) once there are ``eject_after``."""
        self._consecutive_failures += 1
        return self._consecutive_failures >= eject_after and self.set_state(WorkerState.EJECTED, now, reason)

    def fail(self, reason: str, now: float) -> bool:
        """Given up on (a start timeout, a crash loop): FAILED until its source says otherwise."""
        self._last_error = reason
        return self.set_state(WorkerState.FAILED, now, reason)

    def process_restarting(self, now: float) -> bool:
        """Its supervisor restarts the process: nothing it said holds any more. True (and one
        restart counted) when that moved it to STARTING."""
        self._answered = False
        self._forget_reports()
        self._process_start_time = None
        if not self.set_state(WorkerState.STARTING, now, "process restarting"):
            return False
        self._restarts += 1
        return True

    def restarted_behind_address(self, now: float, why: str) -> None:
        """A new process behind the same address (noticed, not announced): its reports and
        failures were the old one's. It answered already, so ``answered`` stands."""
        self._forget_reports()
        self._consecutive_failures = 0
        self._restarts += 1
        self.set_state(WorkerState.STARTING, now, f"restarted behind its address ({why})")

    def _forget_reports(self) -> None:
        self._reported_load = None
        self._reported_at = None

    def set_drained(self, drained: bool) -> None:
        self._drained = drained

    def set_retiring(self, retiring: bool) -> None:
        self._retiring = retiring

    # ---- health and request outcomes ---------------------------------------------------------
    def answered_probe(self) -> None:
        self._answered = True
        self._consecutive_failures = 0

    def note_error(self, error: str) -> None:
        """What went wrong last (``GET /admin/pools``); changes nothing else."""
        self._last_error = error

    def wait_half_open_again(self, now: float) -> None:
        """An ejected worker's half-open probe (or the gate's re-test) is now: the next is a
        full ``half_open_after_s`` from here."""
        self._ejected_at = now

    def request_succeeded(self) -> None:
        self._consecutive_failures = 0
        self._failed_after_arrival = False

    def mark_failed_after_arrival(self) -> None:
        self._failed_after_arrival = True

    def record_start_time(self, started: float) -> float | None:
        """Its process's start time as read now; returns the one known before (None: none)."""
        previous, self._process_start_time = self._process_start_time, started
        return previous

    def record_quality(self, quality: dict[str, object]) -> None:
        self._quality = quality

    def note_quality(self, key: str, value: object) -> None:
        """Add to its quality record (an ejection's evidence, a re-test's outcome); none yet: ignored."""
        if self._quality is not None:
            self._quality[key] = value

    # ---- load ---------------------------------------------------------------------------
    def lease_taken(self) -> None:
        self._inflight += 1

    def lease_returned(self) -> None:
        self._inflight -= 1

    def note_release(self, now: float) -> None:
        self._recent_releases.append(now)

    def releases_since(self, since: float) -> int:
        return sum(1 for at in self._recent_releases if at >= since)

    def read_load_from(self, source: LoadSource) -> None:
        self._load_source = source

    def apply_fleet_leases(self, others: int | None) -> None:
        """Other replicas' leases here as the shared fleet view counts them; None: no view."""
        self._others = others

    def fresh_report(self, now: float, stale_after_s: float) -> int | None:
        """The worker's load as of now: what others (other gateway replicas) had on it at
        the last report, plus our own exact in-flight. Adding only our leases taken since
        the report (and never our releases) kept requests that had already finished in the
        count until the next report: a closed-loop client at concurrency 3 then saw the
        fleet at the balanced threshold and was sent to high-throughput."""
        if self._reported_at is None or self._reported_load is None or now - self._reported_at > stale_after_s:
            return None
        others = max(0, self._reported_load - self._report_leak - self._inflight_at_report)
        return others + self._inflight

    def fleet_load(self) -> int | None:
        """Every replica's leases here, exact, while the fleet view is shared; else None."""
        return None if self._others is None else self._inflight + self._others

    def observed_load(self) -> int:
        """The load a stream's timing is learned at: every replica's leases here while the
        fleet view is shared, else this gateway's own. Learned at its own leases alone, each
        of K replicas filed what the worker did at load L under about L / K, so its curves
        made every load look slower than it is and its `balanced` requests left the
        low-latency worker early (at c8, 15 of 32 on high-throughput, against 3 with one
        gateway)."""
        return self._inflight if self._others is None else self._inflight + self._others

    def record_report(self, load: int, now: float, ours: int | None = None) -> None:
        """``ours``: how many of the reported requests are this gateway's (default: now)."""
        self._reported_load = load
        self._reported_at = now
        self._inflight_at_report = self._inflight if ours is None else ours
        if self._others is not None:
            # The fleet's count is exact: what the report has beyond it is lag or a leak.
            leak = self._leak_watch.observe(now, load - self._inflight_at_report - self._others)
            if leak != self._report_leak:
                if leak:
                    log.warning(
                        "worker %s: its load report counts %d request(s) no gateway holds (a leaking counter);"
                        " its reports are corrected by that",
                        self._worker_id,
                        leak,
                        extra={"worker": self._worker_id, "pool": self._pool.value, "leak": leak},
                    )
                else:
                    log.info("worker %s: its load report agrees with the fleet again", self._worker_id)
                self._report_leak = leak

    def load_view(self, now: float, stale_after_s: float) -> WorkerLoad:
        return WorkerLoad(
            worker_id=self._worker_id,
            pool=self._pool,
            routable=self.routable,
            inflight=self._inflight,
            # The fleet's exact count when it is shared: the report then only tells leaks apart.
            reported=self.fresh_report(now, stale_after_s) if self._others is None else self._inflight + self._others,
            slots=self._slots,
        )

    def describe(self, now: float, stale_after_s: float) -> dict[str, object]:
        """What ``GET /admin/pools`` shows for this worker."""
        return {
            "id": self._worker_id,
            "pool": self._pool.value,
            "url": self._url,
            "state": self._state.value,
            "drained": self._drained,
            "retiring": self._retiring,
            "routable": self.routable,
            "managed": self._managed,
            "inflight": self._inflight,
            "reported_load": self._reported_load,
            "report_age_s": None if self._reported_at is None else round(now - self._reported_at, 3),
            "report_fresh": self.fresh_report(now, stale_after_s) is not None,
            "load_source": self._load_source.value,
            "other_replicas_inflight": self._others,
            "report_leak": self._report_leak,
            "report_trusted": self._report_leak == 0,
            "slots": self._slots,
            "consecutive_failures": self._consecutive_failures,
            "last_error": self._last_error,
            "state_for_s": round(now - self._state_since, 3),
            "restarts": self._restarts,
            "quality": self._quality,
        }
