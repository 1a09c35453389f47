"""``serve`` settles the heap once before serving: start-up objects frozen, young threshold raised."""

from __future__ import annotations

import gc

from gateway.serve import GC_YOUNG_THRESHOLD, settle_heap


def test_settle_heap_freezes_what_exists_and_raises_the_young_threshold() -> None:
    threshold = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0  # the objects alive now are never walked again
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
