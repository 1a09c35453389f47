"""Every reason a routing decision or an admission rejection can carry, in one place.

They appear in the ``x-gateway-route-reason`` header, in logs and as the ``reason`` label
of metrics, so they are stable strings. docs/routing.md explains each one.
"""

from __future__ import annotations

from typing import Final

# --- ROUTE: adaptive policy (predictions) ------------------------------------------------
FASTEST_TTFP: Final = "fastest_ttfp"  # latency: lowest predicted TTFP with a latency-grade RTF
FASTEST_FINISH: Final = "fastest_finish"  # balanced: lowest predicted end-to-end time incl. the delay it adds to others
MOST_THROUGHPUT: Final = "most_throughput"  # throughput: where it adds the most fleet audio-seconds per second

# --- ROUTE: rules policy (and shared by adaptive) -------------------------------------------
LL_SLOT_FREE: Final = "ll_slot_free"  # latency: a low-latency slot was free
SPILL_LL_FULL: Final = "spill_ll_full"  # low-latency full (latency: after its queue budget): sent to high-throughput
BALANCED_UNDER_THRESHOLD: Final = "balanced_under_threshold"  # balanced: fleet load under the threshold, low-latency
BALANCED_OVER_THRESHOLD: Final = "balanced_over_threshold"  # balanced: fleet load over the threshold, high-throughput
SPILL_HT_FULL: Final = "spill_ht_full"  # balanced: high-throughput full, a low-latency slot was free
THROUGHPUT_DEFAULT: Final = "throughput_default"  # throughput: high-throughput had a slot
BORROW_LL: Final = "borrow_ll"  # throughput: high-throughput full, low-latency had slots beyond the reserve
NO_LL_WORKERS: Final = "no_ll_workers"  # low-latency has no routable worker: sent to high-throughput
NO_HT_WORKERS: Final = "no_ht_workers"  # high-throughput has no routable worker: sent to low-latency

# --- ROUTE: baselines (the reason is the policy's name) --------------------------------
LOW_LATENCY_ONLY: Final = "low_latency_only"
HIGH_THROUGHPUT_ONLY: Final = "high_throughput_only"
ROUND_ROBIN: Final = "round_robin"
LEAST_LOADED: Final = "least_loaded"

# --- ROUTE: a later sentence of a voice session (routing.classes.deadline) -----------------
DEADLINE_MET: Final = "deadline_met"  # the cheapest worker for the fleet whose first audio comes before playback needs it
DEADLINE_MISSED: Final = "deadline_missed"  # no worker meets its deadline: the earliest first audio anywhere

# --- ROUTE: a request pinned to a pool (x-gateway-pin-pool, where routing.allow_pool_pin is on)
PINNED_POOL: Final = "pinned_pool"  # the pinned pool's worker with the lowest predicted TTFP

# --- ROUTE: a retry after a failed first byte (the policy chose the worker, tried ones excluded)
RETRY_OTHER_WORKER: Final = "retry_other_worker"

# --- WAIT: admission queues the request and asks again when capacity changes -----------
QUEUED_LL_FULL: Final = "queued_ll_full"  # latency: waiting for a low-latency slot within its queue budget
QUEUED_ALL_FULL: Final = "queued_all_full"  # every pool this request may use is full
QUEUED_LL_RESERVED: Final = "queued_ll_reserved"  # throughput: high-throughput full, low-latency's free slots are reserved

# --- REJECT (policy) and admission rejections --------------------------------------------
NO_WORKERS: Final = "no_workers"  # no routable worker in any pool the policy may use (503)
QUEUE_FULL: Final = "queue_full"  # the request's class queue is at its bound (429)
WAIT_TIMEOUT: Final = "wait_timeout"  # no slot within the class's max wait (503)
SHUTTING_DOWN: Final = "shutting_down"  # the gateway is stopping (503)

ROUTE_REASONS: Final = (
    FASTEST_TTFP, FASTEST_FINISH, MOST_THROUGHPUT, LL_SLOT_FREE, SPILL_LL_FULL, BALANCED_UNDER_THRESHOLD, BALANCED_OVER_THRESHOLD, SPILL_HT_FULL,
    THROUGHPUT_DEFAULT, BORROW_LL, NO_LL_WORKERS, NO_HT_WORKERS,
    LOW_LATENCY_ONLY, HIGH_THROUGHPUT_ONLY, ROUND_ROBIN, LEAST_LOADED, RETRY_OTHER_WORKER, DEADLINE_MET, DEADLINE_MISSED,
    PINNED_POOL,
)  # fmt: skip
WAIT_REASONS: Final = (QUEUED_LL_FULL, QUEUED_ALL_FULL, QUEUED_LL_RESERVED)
REJECT_REASONS: Final = (NO_WORKERS, QUEUE_FULL, WAIT_TIMEOUT, SHUTTING_DOWN)
