"""Authenticated messages (``docs/security.md``): the Python consumer stamps everything
it publishes with its connection's RabbitMQ user, so a ``chimed`` with ``reply_users``
accepts its replies and refuses another user's; with ``scheduler_user`` it runs only
tasks ``chimed``'s user published. Real RabbitMQ users on a private vhost, a real
``chimed``."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

import pytest

from chime_consumer import Consumer, Observer, TaskContext, TaskMessage
from chime_consumer.protocol import (
    AckMessage,
    HeartbeatMessage,
    ObserveMessage,
    PresenceMessage,
    ResultMessage,
    replies_from_json,
)
from chime_consumer.testing import TaskBuilder
from support.broker import TestUser, Vhost
from support.inprocess import ReplyLog, serving
from support.processes import Chimed
from support.waiting import until

Users = Callable[[str], TestUser]


def job(name: str, group: str) -> Dict[str, Any]:
    """A paused job (fired only by triggers)."""
    return {"app": "msgauth", "name": name, "schedule": {"every": "1h"},
            "target": {"group": group}, "paused": True}


@asynccontextmanager
async def chimed_with(vhost: Vhost, env: Dict[str, str]) -> AsyncIterator[Chimed]:
    started = Chimed(vhost.amqp_url, env={"CHIME_RECONCILE_INTERVAL": "200ms", **env})
    try:
        await started.ready()
        yield started
    finally:
        started.stop()


async def settled(chimed: Chimed, run_id: str) -> Dict[str, Any]:
    async def check() -> Optional[Dict[str, Any]]:
        run = await chimed.run(run_id)
        return run if run["state"] in ("succeeded", "dead") else None

    return await until(f"run {run_id} to settle", 40, check)


@asynccontextmanager
async def observing(observer: Observer) -> AsyncIterator[Observer]:
    stop = asyncio.Event()
    served = asyncio.ensure_future(observer.serve(until=stop.wait()))

    def registered() -> bool:
        if served.done():
            served.result()
            raise AssertionError("the observer stopped")
        return observer.stats.get("chime_observer_registrations_total", outcome="sent") >= 1

    await until("the observer to register", 20, registered)
    try:
        yield observer
    finally:
        stop.set()
        await asyncio.wait_for(served, 60)


async def test_every_message_carries_the_connections_user(vhost: Vhost, users: Users) -> None:
    app = users("chime-py-app")
    app.grant(vhost)
    consumer = Consumer(app.amqp_url, "g", instance="py-1")

    @consumer.handler("long")
    async def long(ctx: TaskContext) -> None:
        ctx.report_progress(50)
        await asyncio.sleep(0.8)

    observer = Observer(app.amqp_url, "audit", ["shop.*"], lambda task: None)
    log = ReplyLog(vhost)
    async with serving(consumer), observing(observer):
        # A 900 ms run timeout asks for a heartbeat at least every 300 ms.
        task = TaskBuilder("long").group("g").run_timeout_ms(900).build()
        await vhost.publish("chime.tasks", "g", task.to_json())
        await log.wait_for("the result", lambda r: [x for x in r if isinstance(x, ResultMessage)])
    kinds = {type(reply) for reply in log.replies}
    assert {AckMessage, HeartbeatMessage, ResultMessage, PresenceMessage, ObserveMessage} <= kinds
    # The broker took them (a wrong user_id closes the channel) and kept the property.
    assert log.messages and {m["user_id"] for m in log.messages} == {app.name}


async def test_a_task_from_another_user_is_refused_and_chimeds_runs(
    vhost: Vhost, chimed: Chimed, users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    intruder = users("chime-intruder")
    intruder.grant(vhost, "^$", r"^chime\.tasks$", "^$")
    # The test's chimed connects as guest.
    consumer = Consumer(vhost.amqp_url, "orders", instance="py-1", scheduler_user="guest")
    ran: List[TaskMessage] = []

    @consumer.handler("work")
    async def work(ctx: TaskContext) -> Any:
        ran.append(ctx.task)
        return {"ran": True}

    caplog.set_level(logging.WARNING, logger="chime_consumer")
    async with serving(consumer):
        forged = TaskBuilder("work").group("orders").payload({"marker": "forged-secret"}).build()
        await vhost.publish("chime.tasks", "orders", forged.to_json(), as_user=intruder)
        # guest publishes it, but without user_id.
        unsigned = TaskBuilder("work").group("orders").payload({"marker": "unsigned-secret"}).build()
        await vhost.publish("chime.tasks", "orders", unsigned.to_json())
        created = await chimed.create_job(job("work", "orders"))
        fired = await chimed.trigger(created["id"])
        run = await settled(chimed, fired["id"])
        assert run["state"] == "succeeded" and run["consumer"] == "py-1", run

        async def both_dead_lettered() -> bool:
            return (await vhost.queue_state("chime.group.orders.dlq"))[0] == 2

        await until("both refused tasks dead-lettered", 20, both_dead_lettered)
    assert [str(task.task_id) for task in ran] == [fired["id"]]
    assert consumer.stats.get("chime_consumer_refused_tasks_total", reason="user") == 2
    assert await vhost.queue_state("chime.group.orders") == (0, 0)
    refused = [r for r in caplog.records
               if r.getMessage() == "dead-lettering a task not published by the scheduler's user"]
    assert [(r.levelno, r.user, r.expected) for r in refused] == [  # type: ignore[attr-defined]
        (logging.WARNING, intruder.name, "guest"), (logging.WARNING, None, "guest")]
    for record in caplog.records:
        assert "secret" not in f"{record.getMessage()} {record.__dict__}", record.__dict__
    bodies = sorted(body for body, _ in await vhost.drain("chime.group.orders.dlq"))
    assert bodies == sorted([forged.to_json(), unsigned.to_json()])


async def test_reply_users_accept_the_python_consumers_user(vhost: Vhost, users: Users) -> None:
    app = users("chime-app-a")
    app.grant(vhost)
    async with chimed_with(vhost, {"CHIME_REPLY_USERS": f"ga={app.name}"}) as chimed:
        consumer = Consumer(app.amqp_url, "ga", instance="a-1")
        consumer.fallback_handler(lambda ctx: {"by": ctx.consumer})
        async with serving(consumer):
            created = await chimed.create_job(job("own", "ga"))
            fired = await chimed.trigger(created["id"])
            run = await settled(chimed, fired["id"])
        assert run["state"] == "succeeded" and run["consumer"] == "a-1", run
        assert run["output"] == {"by": "a-1"} and run["acked_at"] is not None
        # Presence, ack and result were all accepted.
        rejected = await chimed.metric('chime_rejected_replies_total{reason="user"}')
        assert not rejected, rejected
        assert (await vhost.queue_state("chime.replies.dlq"))[0] == 0


async def test_reply_users_refuse_another_users_consumer(vhost: Vhost, users: Users) -> None:
    app_a, app_b = users("chime-app-a"), users("chime-app-b")
    app_a.grant(vhost)
    app_b.grant(vhost)
    async with chimed_with(vhost, {"CHIME_REPLY_USERS": f"ga={app_a.name},gb={app_b.name}"}) as chimed:
        # App B's user consumes app A's group: it runs the task, but cannot settle it.
        consumer = Consumer(app_b.amqp_url, "ga", instance="b-1")
        consumer.fallback_handler(lambda ctx: {"forged": True})
        refused: List[Dict[str, Any]] = []

        async def result_refused() -> bool:
            for body, properties in await vhost.drain("chime.replies.dlq"):
                for reply in replies_from_json(body):
                    refused.append({"reply": reply, **properties["headers"]})
            return any(isinstance(r["reply"], ResultMessage) for r in refused)

        async with serving(consumer):
            created = await chimed.create_job(job("theirs", "ga"))
            fired = await chimed.trigger(created["id"])
            await until("the forged result in the reply DLQ", 30, result_refused)
        kinds = {type(r["reply"]) for r in refused}
        assert {PresenceMessage, AckMessage, ResultMessage} <= kinds, refused
        for r in refused:
            assert r["x-chime-published-by"] == app_b.name, r
            reason = r["x-chime-reject-reason"]
            assert f'"{app_b.name}" may not answer for group "ga"' in reason, r
        results = [r["reply"] for r in refused if isinstance(r["reply"], ResultMessage)]
        assert [str(r.task_id) for r in results] == [fired["id"]]
        rejected = await chimed.metric('chime_rejected_replies_total{reason="user"}')
        assert rejected is not None and rejected >= 3, rejected
        # The run is not settled: once chimed has marked it dispatched (it may note the
        # publisher's confirm after the replies came back), nothing of B's applied.
        async def marked_dispatched() -> Optional[Dict[str, Any]]:
            run = await chimed.run(fired["id"])
            return run if run["dispatched_at"] is not None else None

        run = await until("the run to be marked dispatched", 20, marked_dispatched)
        assert run["state"] == "dispatched" and run["consumer"] is None, run
        assert run["acked_at"] is None and run["output"] is None, run
        # B's consumer did run it: its result reached chimed, which refused it.
        assert consumer.stats.get("chime_consumer_tasks_total", outcome="succeeded") >= 1
