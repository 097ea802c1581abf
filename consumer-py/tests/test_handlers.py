"""Handlers and their context, without a broker: outcomes of returns and exceptions,
sync and async handlers, progress, idempotency keys per mode, the testing helpers and
the in-memory store."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, List

import pytest

from chime_consumer import (
    ConfigError,
    Consumer,
    DeliveryMode,
    Failed,
    MemoryStore,
    PermanentError,
    Progress,
    RetryableError,
    Succeeded,
    TaskContext,
    TaskError,
)
from chime_consumer.handlers import invoke, is_async_callable
from chime_consumer.heartbeat import MIN_GAP, interval
from chime_consumer.key_lock import KeyLocks
from chime_consumer.protocol import RecordedOutcome, broadcast_idempotency_key
from chime_consumer.testing import TaskBuilder, run_handler, run_handler_async

URL = "amqp://guest:guest@127.0.0.1:5672/%2f"


def test_returning_is_success_with_output() -> None:
    def greet(ctx: TaskContext) -> Any:
        return {"hello": ctx.payload["name"]}

    task = TaskBuilder("greet").payload({"name": "ada"}).build()
    assert run_handler(greet, task) == Succeeded({"hello": "ada"})


async def test_failures_map_to_the_wire() -> None:
    async def retry(ctx: TaskContext) -> None:
        raise RetryableError("busy", retry_after=timedelta(seconds=2))

    async def permanent(ctx: TaskContext) -> None:
        raise PermanentError("bad payload")

    def crash(ctx: TaskContext) -> None:
        raise KeyError("missing")

    async def not_json(ctx: TaskContext) -> Any:
        return {"when": datetime.now()}

    task = TaskBuilder("j").build()
    assert await run_handler_async(retry, task) == Failed(TaskError("busy", True, 2000))
    assert await run_handler_async(permanent, task) == Failed(TaskError("bad payload", False))
    assert await run_handler_async(crash, task) == Failed(
        TaskError("handler raised KeyError: 'missing'", False)
    )
    outcome = await run_handler_async(not_json, task)
    assert isinstance(outcome, Failed) and not outcome.error.retryable
    assert "not JSON" in outcome.error.message
    with pytest.raises(ValueError):
        RetryableError("x", retry_after=-1)


async def test_sync_handlers_run_in_a_thread_and_async_ones_on_the_loop() -> None:
    seen: List[str] = []

    def blocking(ctx: TaskContext) -> None:
        seen.append(threading.current_thread().name)

    async def on_loop(ctx: TaskContext) -> None:
        seen.append(threading.current_thread().name)

    ctx = TaskContext(TaskBuilder("j").build(), "me")
    assert await invoke(blocking, ctx, "worker-x") == Succeeded(None)
    assert await invoke(on_loop, ctx, "worker-y") == Succeeded(None)
    assert seen == ["worker-x", threading.current_thread().name]

    class Callable:
        async def __call__(self, ctx: TaskContext) -> int:
            return 1

    assert is_async_callable(Callable()) and not is_async_callable(blocking)


async def test_a_blocking_handler_does_not_stall_the_loop() -> None:
    release = threading.Event()

    def blocking(ctx: TaskContext) -> str:
        release.wait(5)
        return "done"

    ctx = TaskContext(TaskBuilder("j").build(), "me")
    running = asyncio.ensure_future(invoke(blocking, ctx, "blocker"))
    await asyncio.sleep(0.05)
    assert not running.done(), "the loop runs while the handler blocks"
    release.set()
    assert await running == Succeeded("done")


def test_progress_is_clamped_and_cut() -> None:
    reports: List[Progress] = []
    ctx = TaskContext(TaskBuilder("j").build(), "me", progress=reports.append)
    ctx.report_progress(140, "x" * 600)
    ctx.report_progress(float("nan"), None)
    assert reports[0] == Progress(100.0, "x" * 500)
    assert reports[1] == Progress(None, None)
    TaskContext(TaskBuilder("j").build(), "me").report_progress(5)  # no sink: no-op


def test_idempotency_key_is_per_instance_only_for_broadcasts() -> None:
    group = TaskContext(TaskBuilder("j").build(), "a")
    assert group.idempotency_key == group.task_id
    broadcast = TaskBuilder("j").mode(DeliveryMode.BROADCAST).build()
    on_a = TaskContext(broadcast, "a").idempotency_key
    assert on_a == broadcast_idempotency_key(broadcast.task_id, "a")
    assert on_a != TaskContext(broadcast, "b").idempotency_key
    zoned = TaskContext(TaskBuilder("j").mode(DeliveryMode.ZONE, "dc1").build(), "a")
    assert zoned.idempotency_key == zoned.task_id and zoned.zone == "dc1"
    sharded = TaskBuilder("j").shard(3, 8).build()
    assert (sharded.shard, sharded.shard_total) == (3, 8)
    assert TaskContext(sharded, "a").idempotency_key == sharded.task_id


def test_typed_payloads() -> None:
    @dataclass
    class Close:
        older_than_min: int

    ctx = TaskContext(TaskBuilder("j").payload({"older_than_min": 30}).build(), "me")
    assert ctx.payload_as(Close) == Close(30)
    wrong = TaskContext(TaskBuilder("j").payload({"other": 1}).build(), "me")
    with pytest.raises(PermanentError):
        wrong.payload_as(Close)


def test_heartbeat_interval_fits_the_run_timeout() -> None:
    assert interval(10, None) == 10
    assert interval(10, 300_000) == 10
    assert interval(10, 6_000) == 2
    assert interval(10, 30) == MIN_GAP


async def test_memory_store_keeps_the_first_outcome_and_forgets_the_oldest() -> None:
    store = MemoryStore(capacity=2)
    a, b, c = (uuid.UUID(int=i) for i in (1, 2, 3))
    now = datetime.now(timezone.utc)
    await store.record(a, RecordedOutcome(Succeeded(1), now))
    await store.record(a, RecordedOutcome(Succeeded(99), now))
    kept = await store.lookup(a)
    assert kept is not None and kept.outcome == Succeeded(1)
    await store.record(b, RecordedOutcome(Succeeded(2), now))
    await store.record(c, RecordedOutcome(Succeeded(3), now))
    assert len(store) == 2 and await store.lookup(a) is None and await store.lookup(c) is not None


async def test_a_duplicate_waits_for_the_same_key() -> None:
    locks = KeyLocks()
    key = uuid.uuid4()
    order: List[str] = []

    async def hold(name: str, pause: float) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            await asyncio.sleep(pause)
            order.append(f"{name} out")

    await asyncio.gather(hold("first", 0.05), hold("second", 0))
    assert order == ["first in", "first out", "second in", "second out"]
    assert len(locks) == 0


def test_bad_configuration_is_refused_naming_the_option() -> None:
    def refused(option: str, **kwargs: Any) -> None:
        args = {"amqp_url": URL, "group": "orders", "instance": "i-1", **kwargs}
        with pytest.raises(ConfigError) as error:
            Consumer(**args)
        assert error.value.option == option, error.value

    refused("group", group="bad group")
    refused("group", group="a.b")
    refused("instance", instance="a b")
    refused("instance", instance="x" * 129)
    refused("zone", zone="dc.1")
    refused("concurrency", concurrency=0)
    refused("prefetch", prefetch=0)
    refused("amqp_url", amqp_url="http://localhost")
    refused("zone", group="g" * 128, zone="z" * 128)
    refused("broadcast", group="g" * 128, instance="i" * 128, broadcast=True)
    import ssl

    refused("ssl_context", ssl_context=ssl.create_default_context())
    consumer = Consumer(URL, "orders", instance="ip-10-0-0-1.ec2.internal:42", concurrency=5)
    assert consumer.settings.prefetch == 10
    with pytest.raises(ConfigError) as error:
        consumer.handler("bad.job")
    assert error.value.option == "job"


def test_instance_and_zone_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHIME_INSTANCE", "from-env")
    monkeypatch.setenv("CHIME_ZONE", "dc2")
    consumer = Consumer(URL, "orders")
    assert consumer.instance == "from-env" and consumer.settings.zone == "dc2"
    assert Consumer(URL, "orders", zone="dc1").settings.zone == "dc1"
    monkeypatch.setenv("CHIME_INSTANCE", "")
    monkeypatch.delenv("CHIME_ZONE")
    consumer = Consumer(URL, "orders")
    assert consumer.instance.endswith(f"-{__import__('os').getpid()}")
    assert consumer.settings.zone is None


async def test_serving_without_handlers_is_refused() -> None:
    with pytest.raises(ConfigError):
        await Consumer(URL, "orders", instance="i").serve()


def test_observers_check_their_patterns() -> None:
    from chime_consumer import Observer

    observer = Observer(URL, "audit", ["shop.*", "billing.#", "shop.*"])
    assert observer.patterns == ("shop.*", "billing.#") and observer.queue == "chime.observe.audit"
    assert (observer.concurrency, observer.prefetch) == (1, 2)
    for patterns, option in (([], "patterns"), (["shop..x"], "patterns"),
                             ([f"app{i}.*" for i in range(65)], "patterns")):
        with pytest.raises(ConfigError) as error:
            Observer(URL, "audit", patterns)
        assert error.value.option == option
    with pytest.raises(ConfigError):
        Observer(URL, "a.b", ["#"])


def test_json_log_lines_carry_the_extra_fields() -> None:
    import json
    import logging

    from chime_consumer import JsonFormatter

    record = logging.LogRecord("chime_consumer", logging.WARNING, __file__, 1,
                               "task not completed", (), None)
    record.task_id = "t-1"
    record.attempt = 2
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "task not completed" and line["level"] == "warning"
    assert (line["task_id"], line["attempt"], line["logger"]) == ("t-1", 2, "chime_consumer")
