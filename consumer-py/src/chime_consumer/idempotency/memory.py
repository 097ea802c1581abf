"""The default, in-process idempotency store."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Optional

from ..protocol.messages import RecordedOutcome


class MemoryStore:
    """Keeps the outcomes of the most recent ``capacity`` tasks in memory (default
    100 000); the oldest record is forgotten first. Lost on restart."""

    DEFAULT_CAPACITY = 100_000

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, capacity)
        self._records: "OrderedDict[uuid.UUID, RecordedOutcome]" = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    async def lookup(self, key: uuid.UUID) -> Optional[RecordedOutcome]:
        return self._records.get(key)

    async def record(self, key: uuid.UUID, outcome: RecordedOutcome) -> None:
        if key in self._records:
            return
        if len(self._records) >= self.capacity:
            self._records.popitem(last=False)
        self._records[key] = outcome
