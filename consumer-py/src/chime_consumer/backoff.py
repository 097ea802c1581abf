"""Exponential backoff with jitter for reconnect loops and store outages, like the Rust
library's ``backoff.rs``: the delay doubles after each failure from ``initial`` up to
``maximum``, plus up to 25 % jitter so a fleet of clients does not retry in lock-step."""

from __future__ import annotations

import random


class Backoff:
    """Delays in seconds: ``initial``, doubling, capped at ``maximum``, each plus up to
    a quarter of itself at random."""

    def __init__(self, initial: float = 0.1, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial
        self.attempts = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call doubles the following one."""
        base = self._next
        self._next = min(self._next * 2, self.maximum)
        self.attempts += 1
        return base + random.uniform(0, base / 4)

    def reset(self) -> None:
        """Starts over after a success."""
        self._next = self.initial
        self.attempts = 0
