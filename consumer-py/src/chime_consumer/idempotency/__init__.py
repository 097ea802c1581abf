"""Idempotency stores: remember each task's outcome by its idempotency key, so a
duplicate delivery re-sends the recorded result instead of running the handler again.

- :class:`MemoryStore` (the default): bounded, per process. Duplicates that reach the
  same instance run once; duplicates spread over instances may each run.
- :class:`PostgresIdempotencyStore` (extra ``postgres``, psycopg 3): shared by every
  instance, Rust or Python, through the same table as the Rust library's
  ``PgIdempotencyStore``. Its transactional handler form records the key in the same
  transaction as the handler's own writes, so those writes happen exactly once.

Only successes are recorded: after a failure a later attempt (a retry, or a replay
from the dead-letter queue once the handler was fixed) runs the handler again.
"""

from __future__ import annotations

import uuid
from typing import Optional, Protocol, runtime_checkable


from ..protocol.messages import RecordedOutcome
from .memory import MemoryStore


class IdempotencyError(Exception):
    """A store could not answer (its database is unreachable, a record is corrupt). The
    consumer holds the delivery and asks again with backoff rather than requeueing it."""


@runtime_checkable
class IdempotencyStore(Protocol):
    """Remembers outcomes by idempotency key."""

    async def lookup(self, key: uuid.UUID) -> Optional[RecordedOutcome]:
        """The recorded outcome of ``key``, if it finished before."""
        ...

    async def record(self, key: uuid.UUID, outcome: RecordedOutcome) -> None:
        """Records the outcome of ``key``; recording a key twice keeps the first."""
        ...


def __getattr__(name: str) -> object:
    # The PostgreSQL store needs psycopg (extra "postgres"); import it only when asked.
    if name == "PostgresIdempotencyStore":
        from .postgres import PostgresIdempotencyStore

        return PostgresIdempotencyStore
    raise AttributeError(name)


__all__ = ["IdempotencyError", "IdempotencyStore", "MemoryStore", "PostgresIdempotencyStore"]
