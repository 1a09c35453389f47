"""``serve`` settles the heap once before serving: the start-up objects frozen."""

from __future__ import annotations

import gc

from gateway.serve import settle_heap


def test_settle_heap_freezes_what_exists_and_keeps_the_collectors_thresholds() -> None:
    threshold = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0  # the objects alive now are never walked again
        assert gc.get_threshold() == threshold
    finally:
        gc.unfreeze()
