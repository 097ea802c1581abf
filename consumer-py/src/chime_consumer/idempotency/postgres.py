"""The PostgreSQL idempotency store (psycopg 3), shared by every instance of a group and
by the Rust library: the same table ``chime_idempotency (key uuid PRIMARY KEY, outcome
jsonb, finished_at timestamptz)``, the same index, the same outcome JSON
(``{"status": "succeeded", "output": ...}``) and the same advisory lock around its
creation as ``consumer-lib/src/idempotency/postgres.rs``, so Rust and Python instances of
one group can share it.

The transactional form (:meth:`PostgresIdempotencyStore.execute`) runs a handler inside
the transaction that records its key: the key's row is inserted first (a concurrent
delivery of the same key waits on that row lock), the handler writes through the same
connection, and the outcome commits with its writes, so they happen exactly once. A
failure rolls everything back and leaves no record.

Retention: outcomes are kept 7 days after they finished (``retention``; ``None`` keeps
them forever). At most every 10 minutes per store a write starts a background prune
deleting older outcomes 1 000 rows per statement, oldest first, skipping rows another
instance is deleting.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, Optional, Tuple

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ..context import TaskContext
from ..handlers import failure_of, success_of
from ..protocol.messages import (
    Failed,
    MalformedMessage,
    RecordedOutcome,
    TaskOutcome,
    outcome_from_dict,
)
from ..protocol.times import utc_now
from . import IdempotencyError

log = logging.getLogger("chime_consumer")

#: Advisory lock key guarding creation of the table ("chimeidem"), as the Rust store.
SCHEMA_LOCK = 0x6368696D65696465
#: How long outcomes are kept after they finished, by default.
DEFAULT_RETENTION = timedelta(days=7)
#: Most outcomes one prune statement deletes.
PRUNE_BATCH = 1000
#: A write starts a prune at most this often (seconds).
PRUNE_INTERVAL = 600.0

#: What a database outage looks like: a driver error, or no pooled connection in time.
_DATABASE_ERRORS = (psycopg.Error, PoolTimeout)

_CREATE_TABLE = """CREATE TABLE IF NOT EXISTS chime_idempotency (
    key uuid PRIMARY KEY,
    outcome jsonb,
    finished_at timestamptz
)"""
_CREATE_INDEX = """CREATE INDEX IF NOT EXISTS chime_idempotency_finished
    ON chime_idempotency (finished_at)"""
_CLAIM = "INSERT INTO chime_idempotency (key) VALUES (%s) ON CONFLICT (key) DO NOTHING"
_SET_OUTCOME = "UPDATE chime_idempotency SET outcome = %s, finished_at = %s WHERE key = %s"
_LOOKUP = """SELECT outcome, finished_at FROM chime_idempotency
    WHERE key = %s AND outcome IS NOT NULL"""
_RECORD = """INSERT INTO chime_idempotency (key, outcome, finished_at) VALUES (%s, %s, %s)
    ON CONFLICT (key) DO UPDATE SET outcome = EXCLUDED.outcome,
        finished_at = EXCLUDED.finished_at
    WHERE chime_idempotency.outcome IS NULL"""
_PRUNE = """DELETE FROM chime_idempotency WHERE key IN (
    SELECT key FROM chime_idempotency WHERE finished_at < %s
    ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED)"""

#: A transactional handler: ``async def handler(ctx, conn: psycopg.AsyncConnection)`` or
#: ``def handler(ctx, conn: psycopg.Connection)``; it returns its output or raises.
TransactionalHandler = Callable[[TaskContext, Any], Any]


class _Rollback(Exception):
    """Ends the transaction without a commit, carrying what to report."""

    def __init__(self, result: "Tuple[RecordedOutcome, bool]") -> None:
        super().__init__("rollback")
        self.result = result


async def _run_async(handler: TransactionalHandler, ctx: TaskContext, conn: Any) -> TaskOutcome:
    try:
        return success_of(await handler(ctx, conn))
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - reported as the outcome
        return Failed(failure_of(error))


def _recorded(row: Any, key: uuid.UUID) -> RecordedOutcome:
    outcome, finished_at = row
    try:
        return RecordedOutcome(outcome=outcome_from_dict(outcome), finished_at=finished_at)
    except MalformedMessage as error:
        raise IdempotencyError(f"corrupt idempotency record for {key}: {error}") from None


class PostgresIdempotencyStore:
    """Outcomes kept in table ``chime_idempotency`` of a PostgreSQL database the
    application already owns (created, with its index, if missing).

    ``conninfo`` is a libpq connection string or URL. The store keeps its own pool of
    up to ``max_connections`` connections; give it at least the consumer's concurrency
    when handlers are transactional (each holds one while it runs). Use it as an async
    context manager, or call :meth:`open` and :meth:`close`.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        retention: Optional[timedelta] = DEFAULT_RETENTION,
        max_connections: int = 10,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._conninfo = conninfo
        self.retention = retention if retention else None
        self._max = max_connections
        self._pool: Optional[AsyncConnectionPool] = None
        self._sync_pool: Optional[ConnectionPool] = None
        self._sync_lock = threading.Lock()
        self._open_lock: Optional[asyncio.Lock] = None
        self._last_prune = 0.0
        self._prune_lock = threading.Lock()
        self._background: "set[asyncio.Task[None]]" = set()

    async def __aenter__(self) -> "PostgresIdempotencyStore":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Opens the pool and creates the table if it is missing. Idempotent; the
        consumer calls it when it starts."""
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._pool is not None:
                return
            pool = AsyncConnectionPool(
                self._conninfo, min_size=1, max_size=self._max, open=False
            )
            try:
                await pool.open(wait=True)
                async with pool.connection() as conn:
                    # CREATE TABLE IF NOT EXISTS is not atomic in PostgreSQL: instances
                    # starting together serialise on a transaction-scoped advisory lock.
                    async with conn.transaction():
                        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                        await conn.execute(_CREATE_TABLE)
                        await conn.execute(_CREATE_INDEX)
            except _DATABASE_ERRORS as error:
                await pool.close()
                raise IdempotencyError(f"idempotency store database error: {error}") from None
            self._pool = pool

    async def close(self) -> None:
        """Closes the pools; background prunes are awaited first."""
        for task in list(self._background):
            await asyncio.gather(task, return_exceptions=True)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        with self._sync_lock:
            sync_pool, self._sync_pool = self._sync_pool, None
        if sync_pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, sync_pool.close)

    def _async_pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise IdempotencyError("the idempotency store is not open: call open() first")
        return self._pool

    def _blocking_pool(self) -> ConnectionPool:
        with self._sync_lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self._conninfo, min_size=1, max_size=self._max, open=True
                )
            return self._sync_pool

    async def lookup(self, key: uuid.UUID) -> Optional[RecordedOutcome]:
        try:
            async with self._async_pool().connection() as conn:
                row = await (await conn.execute(_LOOKUP, (key,))).fetchone()
        except _DATABASE_ERRORS as error:
            raise IdempotencyError(f"idempotency store database error: {error}") from None
        return None if row is None else _recorded(row, key)

    async def record(self, key: uuid.UUID, outcome: RecordedOutcome) -> None:
        try:
            async with self._async_pool().connection() as conn:
                await conn.execute(
                    _RECORD, (key, Jsonb(outcome.outcome.to_dict()), outcome.finished_at)
                )
        except _DATABASE_ERRORS as error:
            raise IdempotencyError(f"idempotency store database error: {error}") from None
        self._prune_if_due()

    async def prune(self, now: Optional[datetime] = None) -> int:
        """Deletes the outcomes that finished more than the retention before ``now``,
        1 000 per statement, oldest first, until none is left (or another instance is
        deleting the rest); returns how many it deleted."""
        if self.retention is None:
            return 0
        cutoff = (now or utc_now()) - self.retention
        total = 0
        while True:
            async with self._async_pool().connection() as conn:
                deleted = (await conn.execute(_PRUNE, (cutoff, PRUNE_BATCH))).rowcount
            total += deleted
            if deleted < PRUNE_BATCH:
                return total
            await asyncio.sleep(0)

    def _claim_prune(self) -> bool:
        with self._prune_lock:
            now = time.monotonic()
            if self._last_prune and now - self._last_prune < PRUNE_INTERVAL:
                return False
            self._last_prune = now
            return True

    def _prune_if_due(self) -> None:
        if self.retention is None or not self._claim_prune():
            return

        async def prune() -> None:
            try:
                pruned = await self.prune()
                if pruned:
                    log.debug("pruned old idempotency outcomes", extra={"pruned": pruned})
            except Exception as error:  # noqa: BLE001 - retried at the next interval
                log.warning(
                    "pruning idempotency outcomes failed; retrying later",
                    extra={"error": str(error)},
                )

        task = asyncio.ensure_future(prune())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def execute(
        self, handler: TransactionalHandler, ctx: TaskContext
    ) -> Tuple[RecordedOutcome, bool]:
        """Runs async ``handler(ctx, conn)`` exactly once per idempotency key across every
        instance; returns the outcome and whether it was replayed (another delivery of
        the key finished before). Database failures raise :class:`IdempotencyError`."""
        key = ctx.idempotency_key
        try:
            async with self._async_pool().connection() as conn:
                try:
                    async with conn.transaction():
                        claimed = (await conn.execute(_CLAIM, (key,))).rowcount == 1
                        if not claimed:
                            raise _Rollback((await self._replay(conn, key), True))
                        outcome = await _run_async(handler, ctx, conn)
                        recorded = RecordedOutcome(outcome, utc_now())
                        if isinstance(outcome, Failed):
                            raise _Rollback((recorded, False))
                        await conn.execute(
                            _SET_OUTCOME, (Jsonb(outcome.to_dict()), recorded.finished_at, key)
                        )
                except _Rollback as rollback:
                    return rollback.result
        except _DATABASE_ERRORS as error:
            raise IdempotencyError(f"idempotency store database error: {error}") from None
        self._prune_if_due()
        return recorded, False

    async def _replay(self, conn: psycopg.AsyncConnection[Any], key: uuid.UUID) -> RecordedOutcome:
        # The claim waited for the other delivery's transaction; it committed an outcome.
        row = await (await conn.execute(_LOOKUP, (key,))).fetchone()
        if row is None:
            raise IdempotencyError(f"corrupt idempotency record for {key}: key without outcome")
        return _recorded(row, key)

    def execute_blocking(
        self, handler: TransactionalHandler, ctx: TaskContext
    ) -> Tuple[RecordedOutcome, bool]:
        """The transactional form for a sync ``handler(ctx, conn: psycopg.Connection)``;
        runs in the handler's thread."""
        key = ctx.idempotency_key
        try:
            with self._blocking_pool().connection() as conn:
                try:
                    with conn.transaction():
                        claimed = conn.execute(_CLAIM, (key,)).rowcount == 1
                        if not claimed:
                            row = conn.execute(_LOOKUP, (key,)).fetchone()
                            if row is None:
                                raise IdempotencyError(
                                    f"corrupt idempotency record for {key}: key without outcome"
                                )
                            raise _Rollback((_recorded(row, key), True))
                        try:
                            outcome = success_of(handler(ctx, conn))
                        except Exception as error:  # noqa: BLE001 - reported as the outcome
                            outcome = Failed(failure_of(error))
                        recorded = RecordedOutcome(outcome, utc_now())
                        if isinstance(outcome, Failed):
                            raise _Rollback((recorded, False))
                        conn.execute(
                            _SET_OUTCOME, (Jsonb(outcome.to_dict()), recorded.finished_at, key)
                        )
                except _Rollback as rollback:
                    return rollback.result
        except _DATABASE_ERRORS as error:
            raise IdempotencyError(f"idempotency store database error: {error}") from None
        return recorded, False

