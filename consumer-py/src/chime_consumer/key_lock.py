"""Per-key mutual exclusion inside one consumer instance, so a duplicate delivery that
arrives while the same task still runs waits for it and then replays its outcome."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, Dict, Tuple


class KeyLocks:
    """Async locks by key, forgotten once nobody holds or awaits them."""

    def __init__(self) -> None:
        self._locks: Dict[uuid.UUID, Tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: uuid.UUID) -> AsyncIterator[None]:
        """Waits until no other holder has ``key``, then holds it for the block."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
