"""Counters of what a consumer or observer did, named like the Rust library's metrics
(``chime_consumer_tasks_total{outcome=...}``), so an application can export them to its
own metrics system (read :meth:`Counters.snapshot`) and tests can assert on them."""

from __future__ import annotations

import threading
from typing import Dict, Tuple

Key = Tuple[str, Tuple[Tuple[str, str], ...]]


class Counters:
    """Monotonic counters by name and labels; safe to bump from any thread."""

    def __init__(self) -> None:
        self._values: Dict[Key, int] = {}
        self._lock = threading.Lock()

    def increment(self, name: str, amount: int = 1, **labels: str) -> None:
        """Adds ``amount`` to counter ``name`` with ``labels``."""
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def get(self, name: str, **labels: str) -> int:
        """The sum of counter ``name`` over every label set that includes ``labels``."""
        wanted = set(labels.items())
        with self._lock:
            return sum(
                value
                for (counter, counter_labels), value in self._values.items()
                if counter == name and wanted <= set(counter_labels)
            )

    def snapshot(self) -> Dict[Key, int]:
        """Every counter: ``{(name, ((label, value), ...)): count}``."""
        with self._lock:
            return dict(self._values)
