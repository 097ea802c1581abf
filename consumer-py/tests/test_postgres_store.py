"""The PostgreSQL idempotency store: the Rust library's table and semantics, the
transactional form's exactly-once writes (async and sync handlers), retention, and a
Rust and a Python consumer of one group sharing it: each replays what the other ran."""

from __future__ import annotations

import asyncio
import signal
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, List

import psycopg
import pytest

from chime_consumer import PermanentError, TaskContext
from chime_consumer.idempotency.postgres import PostgresIdempotencyStore
from chime_consumer.protocol import Failed, RecordedOutcome, ResultMessage, Succeeded, TaskError
from chime_consumer.testing import TaskBuilder
from support.broker import Vhost
from support.inprocess import ReplyLog
from support.processes import ConsumerProcess


async def test_the_table_is_the_rust_stores(postgres_url: str) -> None:
    async with PostgresIdempotencyStore(postgres_url):
        pass
    with psycopg.connect(postgres_url) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'chime_idempotency' ORDER BY ordinal_position"
        ).fetchall()
        indexes = {row[0] for row in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'chime_idempotency'")}
    assert columns == [("key", "uuid"), ("outcome", "jsonb"),
                       ("finished_at", "timestamp with time zone")]
    assert "chime_idempotency_finished" in indexes


async def test_outcomes_are_recorded_once_and_read_back(postgres_url: str) -> None:
    async with PostgresIdempotencyStore(postgres_url) as store:
        key = uuid.uuid4()
        at = datetime(2026, 11, 21, 10, 0, 0, 250000, tzinfo=timezone.utc)
        assert await store.lookup(key) is None
        await store.record(key, RecordedOutcome(Succeeded({"closed": 12}), at))
        await store.record(key, RecordedOutcome(Succeeded("second"), at))
        assert await store.lookup(key) == RecordedOutcome(Succeeded({"closed": 12}), at)
    with psycopg.connect(postgres_url) as conn:
        (stored,) = conn.execute("SELECT outcome FROM chime_idempotency WHERE key = %s", (key,)).fetchone()
    # The JSON the Rust library writes and reads (serde's TaskOutcome).
    assert stored == {"status": "succeeded", "output": {"closed": 12}}


async def test_prune_deletes_outcomes_past_the_retention(postgres_url: str) -> None:
    async with PostgresIdempotencyStore(postgres_url, retention=timedelta(days=1)) as store:
        now = datetime.now(timezone.utc)
        old, young, older = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        # The first write starts a background prune, which deletes the old outcome.
        await store.record(old, RecordedOutcome(Succeeded(None), now - timedelta(days=2)))
        await store.record(young, RecordedOutcome(Succeeded(None), now))
        await until_none(store, old)
        # Within the prune interval writes start no other prune; prune() runs one now.
        await store.record(older, RecordedOutcome(Succeeded(None), now - timedelta(days=3)))
        assert await store.lookup(older) is not None
        assert await store.prune(now) == 1
        assert await store.lookup(older) is None and await store.lookup(young) is not None
    forever = PostgresIdempotencyStore(postgres_url, retention=None)
    await forever.open()
    assert await forever.prune() == 0
    await forever.close()


async def until_none(store: PostgresIdempotencyStore, key: uuid.UUID) -> None:
    from support.waiting import until

    async def gone() -> bool:
        return await store.lookup(key) is None

    await until("the background prune", 10, gone)


def effects(url: str) -> List[Any]:
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS effects (task_id uuid, note text)")
        conn.commit()
        return conn.execute("SELECT task_id, note FROM effects ORDER BY note").fetchall()


@pytest.mark.parametrize("sync", [False, True])
async def test_the_transactional_form_writes_exactly_once(postgres_url: str, sync: bool) -> None:
    effects(postgres_url)
    runs: List[str] = []
    gate = threading.Event()

    async def write_async(ctx: TaskContext, conn: Any) -> Any:
        runs.append(ctx.consumer)
        await conn.execute("INSERT INTO effects VALUES (%s, %s)", (ctx.task_id, ctx.consumer))
        await asyncio.get_running_loop().run_in_executor(None, gate.wait, 5)
        if ctx.payload == "fail":
            raise PermanentError("no")
        return {"by": ctx.consumer}

    def write_sync(ctx: TaskContext, conn: Any) -> Any:
        runs.append(ctx.consumer)
        conn.execute("INSERT INTO effects VALUES (%s, %s)", (ctx.task_id, ctx.consumer))
        gate.wait(5)
        if ctx.payload == "fail":
            raise PermanentError("no")
        return {"by": ctx.consumer}

    async with PostgresIdempotencyStore(postgres_url) as store:
        def run(task: Any, instance: str) -> Any:
            ctx = TaskContext(task, instance)
            if sync:
                return asyncio.get_running_loop().run_in_executor(
                    None, store.execute_blocking, write_sync, ctx)
            return store.execute(write_async, ctx)

        task = TaskBuilder("effect").build()
        # Two instances take the same task at once: the second waits on the key's row.
        first = asyncio.ensure_future(run(task, "a"))
        await asyncio.sleep(0.3)
        second = asyncio.ensure_future(run(task, "b"))
        await asyncio.sleep(0.3)
        gate.set()
        (ran, replayed_a), (again, replayed_b) = await asyncio.gather(first, second)
        assert (replayed_a, replayed_b) == (False, True)
        assert ran.outcome == again.outcome == Succeeded({"by": "a"})
        assert runs == ["a"]
        # A failure rolls the handler's writes back and records nothing: it runs again.
        failing = TaskBuilder("effect").payload("fail").build()
        outcome, replayed = await run(failing, "a")
        assert outcome.outcome == Failed(TaskError("no", False)) and not replayed
        assert await store.lookup(failing.task_id) is None
        outcome, replayed = await run(failing, "b")
        assert not replayed and runs == ["a", "a", "b"]
    assert effects(postgres_url) == [(task.task_id, "a")]


async def test_rust_and_python_instances_share_the_store(
    vhost: Vhost, postgres_url: str, processes: List[ConsumerProcess]
) -> None:
    log = ReplyLog(vhost)

    async def result_of(task: Any, consumer: str) -> ResultMessage:
        """Publishes ``task`` and waits for ``consumer``'s result for it."""
        await vhost.publish("chime.tasks", "shared", task.to_json())

        def mine(replies: List[Any]) -> Any:
            return [r for r in replies if isinstance(r, ResultMessage)
                    and r.task_id == task.task_id and r.consumer == consumer]

        return (await log.wait_for(f"{consumer}'s result", mine))[0]  # type: ignore[no-any-return]

    async def start(kind: str, name: str) -> ConsumerProcess:
        make = ConsumerProcess.rust if kind == "rust" else ConsumerProcess.python
        process = make(vhost.amqp_url, "shared", name, "--postgres", postgres_url)
        processes.append(process)
        await until_consuming(vhost)
        return process

    async def stop(process: ConsumerProcess) -> None:
        process.signal(signal.SIGTERM)
        assert await process.exit_code() == 0, process.log()

    by_rust = TaskBuilder("effect").group("shared").build()
    by_python = TaskBuilder("effect").group("shared").build()

    rust = await start("rust", "rust-1")
    ran = await result_of(by_rust, "rust-1")
    assert not ran.replayed
    await stop(rust)
    python = await start("python", "py-1")
    replayed = await result_of(by_rust, "py-1")
    assert replayed.replayed and replayed.outcome == ran.outcome
    assert not python.of("started"), "Python ran what Rust had run"
    ran = await result_of(by_python, "py-1")
    assert not ran.replayed
    await stop(python)
    rust = await start("rust", "rust-2")
    replayed = await result_of(by_python, "rust-2")
    assert replayed.replayed and replayed.outcome == ran.outcome
    assert not rust.of("started"), "Rust ran what Python had run"
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT task_id, instance FROM test_effects ORDER BY instance").fetchall()
    assert rows == [(by_python.task_id, "py-1"), (by_rust.task_id, "rust-1")]


async def until_consuming(vhost: Vhost) -> None:
    from support.waiting import until

    async def consuming() -> bool:
        return await vhost.consumers("chime.group.shared") == 1

    await until("a consumer on the group's queue", 30, consuming)
