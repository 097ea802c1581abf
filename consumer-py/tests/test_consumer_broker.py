"""The consumer against the real RabbitMQ, with tasks published straight to its queues:
what it sends back (exactly the protocol's replies), malformed tasks, duplicates,
heartbeats with progress, sync and async handlers, broadcast and zone queues, presence,
reconnecting after the broker drops the connection, and draining on stop."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, List

import pytest

from chime_consumer import Consumer, DeliveryMode, RetryableError, TaskContext
from chime_consumer.protocol import (
    AckMessage,
    Failed,
    HeartbeatMessage,
    PresenceMessage,
    ResultMessage,
    Succeeded,
)
from chime_consumer.testing import TaskBuilder
from support.broker import Vhost
from support.inprocess import ReplyLog, serving
from support.waiting import until


def results(replies: List[Any]) -> List[ResultMessage]:
    return [r for r in replies if isinstance(r, ResultMessage)]


async def publish_task(vhost: Vhost, task: Any, exchange: str = "chime.tasks", key: str = "g") -> None:
    await vhost.publish(exchange, key, task.to_json(), message_id=str(task.task_id), app_id="sched-1-0000abcd")


@pytest.mark.parametrize("batch", [True, False])
async def test_a_task_gets_an_ack_then_its_result(vhost: Vhost, batch: bool) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1", batch_replies=batch)
    seen: List[TaskContext] = []

    @consumer.handler("close-orders")
    async def close(ctx: TaskContext) -> Any:
        seen.append(ctx)
        return {"closed": ctx.payload["n"]}

    log = ReplyLog(vhost)
    async with serving(consumer):
        task = TaskBuilder("close-orders").group("g").payload({"n": 12}).attempt(3).build()
        await publish_task(vhost, task)
        await log.wait_for("the result", lambda replies: results(replies))
    about_task = [r for r in log.replies if not isinstance(r, PresenceMessage)]
    ack, result = about_task
    assert isinstance(ack, AckMessage)
    assert (ack.task_id, ack.attempt, ack.consumer) == (task.task_id, 3, "py-1")
    assert isinstance(result, ResultMessage)
    assert (result.task_id, result.attempt, result.replayed) == (task.task_id, 3, False)
    assert result.outcome == Succeeded({"closed": 12})
    assert seen[0].publisher == "sched-1-0000abcd" and seen[0].consumer == "py-1"
    for message in log.messages:
        assert message["content_type"] == "application/json"
        assert message["delivery_mode"] == 2
        assert message["user_id"] == "guest"  # the connection's user, from the URL
        body = json.loads(message["body"])
        expected_id = {"presence": "presence", "batch": "batch"}.get(body["type"], str(task.task_id))
        assert message["message_id"] == expected_id
    # Presence went out as soon as it connected.
    presence = [r for r in log.replies if isinstance(r, PresenceMessage)]
    assert presence and presence[0].instance == "py-1" and presence[0].group == "g"
    assert presence[0].zone is None and presence[0].broadcast is False
    # The delivery was acknowledged: nothing is left in the queue.
    assert await vhost.queue_state("chime.group.g") == (0, 0)


async def test_failures_and_unknown_jobs_are_reported(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1")

    @consumer.handler("flaky")
    def flaky(ctx: TaskContext) -> None:
        raise RetryableError("database unavailable", retry_after=5)

    log = ReplyLog(vhost)
    async with serving(consumer):
        flaky_task = TaskBuilder("flaky").group("g").build()
        unknown = TaskBuilder("nobody-handles-this").group("g").build()
        await publish_task(vhost, flaky_task)
        await publish_task(vhost, unknown)
        done = await log.wait_for("two results", lambda r: len(results(r)) >= 2 and results(r))
    by_task = {r.task_id: r.outcome for r in done}
    retry = by_task[flaky_task.task_id]
    assert isinstance(retry, Failed) and retry.error.retryable
    assert retry.error.retry_after_ms == 5000 and retry.error.message == "database unavailable"
    missing = by_task[unknown.task_id]
    assert isinstance(missing, Failed) and not missing.error.retryable
    assert "no handler registered" in missing.error.message
    assert consumer.stats.get("chime_consumer_tasks_total", outcome="retryable") == 1


async def test_malformed_tasks_go_to_the_groups_dead_letter_queue(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1")
    consumer.fallback_handler(lambda ctx: None)
    async with serving(consumer):
        await vhost.publish("chime.tasks", "g", b"not json at all")
        future = json.loads(TaskBuilder("j").group("g").build().to_json())
        future["v"] = 2
        await vhost.publish("chime.tasks", "g", json.dumps(future).encode())
        async def dead_letters() -> bool:
            return (await vhost.queue_state("chime.group.g.dlq"))[0] == 2

        await until("two dead letters", 20, dead_letters)
    assert consumer.stats.get("chime_consumer_malformed_tasks_total") == 2
    bodies = sorted(body for body, _ in await vhost.drain("chime.group.g.dlq"))
    assert b"not json at all" in bodies and len(bodies) == 2


async def test_a_duplicate_replays_the_recorded_outcome(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1", concurrency=4)
    runs: List[str] = []

    @consumer.handler("once")
    async def once(ctx: TaskContext) -> Any:
        runs.append(str(ctx.idempotency_key))
        await asyncio.sleep(0.3)
        return {"ran": True}

    log = ReplyLog(vhost)
    async with serving(consumer):
        task = TaskBuilder("once").group("g").build()
        # The second copy arrives while the first still runs: it waits, then replays.
        await publish_task(vhost, task)
        await publish_task(vhost, task)
        done = await log.wait_for("two results", lambda r: len(results(r)) >= 2 and results(r))
        await publish_task(vhost, task)
        done = await log.wait_for("three results", lambda r: len(results(r)) >= 3 and results(r))
    assert runs == [str(task.task_id)]
    assert [r.replayed for r in done] == [False, True, True]
    assert all(r.outcome == Succeeded({"ran": True}) for r in done)
    assert done[1].finished_at == done[0].finished_at
    assert consumer.stats.get("chime_consumer_replayed_total") == 2


@pytest.mark.parametrize("sync", [False, True])
async def test_heartbeats_carry_progress_while_the_handler_runs(vhost: Vhost, sync: bool) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1")

    if sync:
        @consumer.handler("long")
        def long_sync(ctx: TaskContext) -> None:
            ctx.report_progress(40, "page 4 of 10")
            time.sleep(1.2)
    else:
        @consumer.handler("long")
        async def long_async(ctx: TaskContext) -> None:
            ctx.report_progress(40, "page 4 of 10")
            await asyncio.sleep(1.2)

    log = ReplyLog(vhost)
    async with serving(consumer):
        # A 900 ms run timeout asks for a heartbeat at least every 300 ms.
        task = TaskBuilder("long").group("g").run_timeout_ms(900).build()
        await publish_task(vhost, task)
        await log.wait_for("the result", lambda r: results(r))
    beats = [r for r in log.replies if isinstance(r, HeartbeatMessage)]
    assert len(beats) >= 3, beats
    assert all(b.task_id == task.task_id and b.attempt == 1 for b in beats)
    assert beats[0].progress is not None and beats[0].progress.percent == 40.0
    assert beats[0].progress.note == "page 4 of 10"
    order = [type(r).__name__ for r in log.replies if not isinstance(r, PresenceMessage)]
    assert order[0] == "AckMessage" and order[-1] == "ResultMessage"


async def test_zone_and_broadcast_queues_are_consumed_with_presence(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "web", instance="web-1", zone="dc1", broadcast=True)
    keys: List[Any] = []

    @consumer.handler("refresh")
    async def refresh(ctx: TaskContext) -> None:
        keys.append((ctx.mode, ctx.zone, ctx.idempotency_key, ctx.task_id))

    log = ReplyLog(vhost)
    async with serving(consumer):
        zoned = TaskBuilder("refresh").group("web").mode(DeliveryMode.ZONE, "dc1").build()
        broadcast = TaskBuilder("refresh").group("web").mode(DeliveryMode.BROADCAST).build()
        await publish_task(vhost, zoned, key="web.dc1")
        await publish_task(vhost, broadcast, exchange="chime.broadcast", key="web")
        await log.wait_for("two results", lambda r: len(results(r)) >= 2)
    assert (DeliveryMode.ZONE, "dc1", zoned.task_id, zoned.task_id) in keys
    broadcast_keys = [k for k in keys if k[0] is DeliveryMode.BROADCAST]
    assert broadcast_keys[0][2] == uuid.uuid5(broadcast.task_id, "web-1")
    presence = [r for r in log.replies if isinstance(r, PresenceMessage)][0]
    assert presence.zone == "dc1" and presence.broadcast is True


async def test_it_reconnects_after_the_broker_drops_the_connection(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1")
    handled: List[str] = []

    @consumer.handler("j")
    async def handle(ctx: TaskContext) -> None:
        handled.append(str(ctx.task_id))

    async with serving(consumer):
        assert await until("a connection to close", 10, lambda: vhost.close_connections() or None)
        await until("the consumer to reconnect", 30,
                    lambda: consumer.stats.get("chime_consumer_reconnects_total") >= 1
                    and consumer.consuming is not None and consumer.consuming.is_set())
        async def consumed() -> bool:
            return await vhost.consumers("chime.group.g") == 1

        await until("the group queue to have a consumer again", 30, consumed)
        task = TaskBuilder("j").group("g").build()
        await publish_task(vhost, task)
        await until("the task after the reconnect", 20, lambda: str(task.task_id) in handled)


async def test_a_deleted_queue_is_declared_again(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1")
    handled: List[str] = []
    consumer.fallback_handler(lambda ctx: handled.append(str(ctx.task_id)))
    async with serving(consumer):
        connection = await vhost.connect()
        channel = await connection.channel()
        await channel.queue_delete("chime.group.g")
        await connection.close()
        await until("the consumer to rebuild its session", 30,
                    lambda: consumer.stats.get("chime_consumer_reconnects_total") >= 1)

        async def consumed() -> bool:
            return await vhost.consumers("chime.group.g") == 1

        await until("the queue to be declared and consumed again", 30, consumed)
        task = TaskBuilder("j").group("g").build()
        await publish_task(vhost, task)
        await until("the task", 20, lambda: str(task.task_id) in handled)


async def test_stopping_drains_running_handlers(vhost: Vhost) -> None:
    consumer = Consumer(vhost.amqp_url, "g", instance="py-1", concurrency=1, drain_timeout=20)
    started = asyncio.Event()

    @consumer.handler("slow")
    async def slow(ctx: TaskContext) -> Any:
        started.set()
        await asyncio.sleep(1.0)
        return "finished"

    log = ReplyLog(vhost)
    stop = asyncio.Event()
    served = asyncio.ensure_future(consumer.serve(until=stop.wait()))
    await until("consuming", 20, lambda: consumer.consuming is not None and consumer.consuming.is_set())
    first = TaskBuilder("slow").group("g").build()
    waiting = TaskBuilder("slow").group("g").build()
    await publish_task(vhost, first)
    await publish_task(vhost, waiting)
    await asyncio.wait_for(started.wait(), 20)
    stop.set()
    await asyncio.wait_for(served, 30)
    done = results(await log.fetch())
    assert [r.task_id for r in done] == [first.task_id]
    assert done[0].outcome == Succeeded("finished")
    # The one that had not started went back to the queue, untouched.
    assert (await vhost.queue_state("chime.group.g"))[0] == 1


async def test_an_unreachable_broker_is_retried_and_no_password_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chime_consumer.logs import fields_of

    consumer = Consumer("amqp://app:s3cret-pw@127.0.0.1:1/prod", "g", instance="py-1")
    consumer.fallback_handler(lambda ctx: None)
    stop = asyncio.Event()
    served = asyncio.ensure_future(consumer.serve(until=stop.wait()))
    await until("two failed attempts", 20,
                lambda: consumer.stats.get("chime_consumer_reconnects_total") >= 2)
    stop.set()
    await asyncio.wait_for(served, 20)
    warnings = [r for r in caplog.records if r.getMessage() == "cannot reach rabbitmq; retrying"]
    assert warnings
    for record in caplog.records:
        text = record.getMessage() + json.dumps(fields_of(record), default=str)
        assert "s3cret-pw" not in text, text
    assert fields_of(warnings[0])["broker"] == "amqp://127.0.0.1:1/prod"
