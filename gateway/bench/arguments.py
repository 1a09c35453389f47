"""What the benchmark's commands share on their command lines, and the quiet machine they wait for.

Argument types (``int_list``) and ``--quiet-load``/``--quiet-wait``: on a small box other
jobs steal the cores the emulated workers need, which shows up as inflated TTFP and bursty
streams that have nothing to do with routing. Benchmarks wait (bounded) for the 1-minute
load average to drop before each configuration, and record it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("levels must be positive integers")
    return values


def load_average() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(threshold: float, max_wait_s: float, poll_s: float = 5.0) -> float:
    """Until the 1-minute load average is below ``threshold`` or ``max_wait_s`` passed; returns it."""
    deadline = time.monotonic() + max_wait_s
    load = load_average()
    announced = False
    while load >= threshold and time.monotonic() < deadline:
        if not announced:
            print(f"waiting for the machine to go quiet (load {load:.1f} >= {threshold:g})", file=sys.stderr)
            announced = True
        time.sleep(poll_s)
        load = load_average()
    return load


def add_quiet_arguments(parser: argparse.ArgumentParser, load: float = 1.5, before: str = "before each setup") -> None:
    """``--quiet-load`` and ``--quiet-wait``, as every benchmark that waits declares them."""
    parser.add_argument("--quiet-load", type=float, default=load,
                        help=f"{before}, wait for the 1-minute load average to drop below this")  # fmt: skip
    parser.add_argument("--quiet-wait", type=float, default=600.0, help="longest wait for a quiet machine, seconds")
