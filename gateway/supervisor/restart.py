"""When to restart an exited worker, and when to give up on it (pure: the clock is passed in)."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from gateway.config import LaunchConfig

# Each delay is scaled by a random factor in (1 - JITTER, 1]: workers that died together
# (a GPU reset, an OOM on a shared host) do not all come back in the same instant.
JITTER = 0.25


@dataclass(frozen=True)
class RestartDecision:
    give_up: bool
    delay_s: float  # wait this long before starting again (0 when giving up)
    exits_in_window: int


class RestartPolicy:
    """Exponential backoff over the exits in the crash-loop window; too many exits = give up.

    Counting exits in the window (rather than a consecutive counter) makes the backoff
    reset by itself once a worker has stayed up for a whole window.
    """

    def __init__(
        self,
        backoff_initial_s: float,
        backoff_max_s: float,
        crash_loop_exits: int,
        crash_loop_window_s: float,
        rng: random.Random | None = None,
    ) -> None:
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = max(backoff_max_s, backoff_initial_s)
        self.crash_loop_exits = crash_loop_exits
        self.crash_loop_window_s = crash_loop_window_s
        self._rng = rng or random.Random()
        self._exits: deque[float] = deque()

    @classmethod
    def from_launch(cls, launch: LaunchConfig, rng: random.Random | None = None) -> RestartPolicy:
        return cls(
            launch.restart_backoff_initial_s,
            launch.restart_backoff_max_s,
            launch.crash_loop_restarts,
            launch.crash_loop_window_s,
            rng,
        )

    def on_exit(self, now: float) -> RestartDecision:
        self._exits.append(now)
        while self._exits and now - self._exits[0] > self.crash_loop_window_s:
            self._exits.popleft()
        count = len(self._exits)
        if count >= self.crash_loop_exits:
            return RestartDecision(give_up=True, delay_s=0.0, exits_in_window=count)
        return RestartDecision(give_up=False, delay_s=self.delay(count), exits_in_window=count)

    def delay(self, exits_in_window: int) -> float:
        # 2**n overflows float for absurd n; the cap is reached long before 64 doublings.
        base = min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(exits_in_window - 1, 64))
        return base * (1.0 - JITTER * self._rng.random())

    def reset(self) -> None:
        """An operator asked for a fresh start: forget past exits."""
        self._exits.clear()
