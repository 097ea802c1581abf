"""The life of one delivery, from parse to acknowledgement (``docs/protocol.md``, "What a
consumer must do, per delivery"). Deliveries from every queue (group, zone, broadcast)
take the same path; outcomes are looked up and recorded by the idempotency key, which is
per instance for broadcast tasks.

1. With ``scheduler_user`` set, a task whose broker-validated ``user_id`` is not that
   user is rejected without requeue (to the group's dead-letter queue), unparsed and
   unrun, and counted (``chime_consumer_refused_tasks_total{reason="user"}``).
   Parse; a body that is not a version-1 task is rejected without requeue (to the
   group's dead-letter queue) and counted.
2. A recorded outcome for the key is replayed as a result (``replayed: true``).
3. Otherwise: publish an ack, run the handler with heartbeats beside it, record a success
   under the key, publish the result behind the ack and wait for its confirm.
4. Only then acknowledge the delivery. An unconfirmed result hands the delivery back
   (after a pause) and its redelivery replays the recorded outcome. While the
   idempotency store is down the delivery is held and retried, not requeued: every
   requeue counts towards the queue's delivery limit.

Extension point (issue 38, cancellation): the handler runs in :func:`_run_plain` /
:func:`_run_transactional` as a coroutine of this delivery's task (sync handlers in a
thread of their own); a cancel message for ``ctx.task_id`` would be routed here to set a
flag the context exposes as ``ctx.cancelled``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, Tuple

from aio_pika.abc import AbstractIncomingMessage

from . import heartbeat
from .backoff import Backoff
from .context import TaskContext
from .handlers import Handlers, Registered, invoke, is_async_callable
from .idempotency import IdempotencyError, IdempotencyStore
from .key_lock import KeyLocks
from .protocol.messages import (
    Failed,
    ProtocolError,
    RecordedOutcome,
    Succeeded,
    TaskError,
    TaskMessage,
    is_final,
)
from .protocol.times import utc_now
from .replies import ReplyError, ReplyPublisher
from .stats import Counters
from .threads import run_in_thread

log = logging.getLogger("chime_consumer")

#: Pause before handing a delivery back, so a persistent failure is not a hot loop.
REQUEUE_PAUSE = 1.0
#: How long a delivery is held while the idempotency store is unavailable (well below
#: RabbitMQ's 30-minute consumer timeout).
MAX_STORE_WAIT = 600.0


class _Stopping(Exception):
    """Shutdown began before the handler started: the delivery goes back to its queue
    when the channel closes."""


@dataclass
class Shared:
    """What every delivery of one consumer shares, across reconnects."""

    group: str
    instance: str
    heartbeat_interval: float
    store: IdempotencyStore
    handlers: Handlers
    stats: Counters
    handler_slots: asyncio.Semaphore
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    key_locks: KeyLocks = field(default_factory=KeyLocks)
    #: Only tasks whose validated ``user_id`` is this user run (``None``: any user's).
    scheduler_user: Optional[str] = None

    async def handler_slot(self) -> bool:
        """Waits for a handler slot; ``False`` once shutdown began (nothing held)."""
        if self.stopping.is_set():
            return False
        acquire = asyncio.ensure_future(self.handler_slots.acquire())
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({acquire, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if self.stopping.is_set():
            acquire.cancel()
            if acquire.done() and not acquire.cancelled():
                self.handler_slots.release()
            return False
        return True


async def settle(action: Callable[[], Awaitable[Any]], what: str, ctx_id: str) -> None:
    """Sends an ack, nack or reject; a channel that is gone only loses it (the broker
    delivers the task again and the consumer replays its recorded outcome)."""
    try:
        await action()
    except Exception as error:  # noqa: BLE001 - the channel is gone
        log.warning(
            f"{what} not sent; the channel is gone and the task will be redelivered",
            extra={"task_id": ctx_id, "error": str(error)},
        )


async def process(message: AbstractIncomingMessage, shared: Shared, replies: ReplyPublisher) -> None:
    """Handles one delivery end to end; never raises."""
    expected = shared.scheduler_user
    if expected is not None and message.user_id != expected:
        # Neither the body nor its task id: what another user sent is not logged.
        log.warning(
            "dead-lettering a task not published by the scheduler's user",
            extra={"user": message.user_id, "expected": expected, "group": shared.group},
        )
        shared.stats.increment("chime_consumer_refused_tasks_total", reason="user")
        await settle(lambda: message.reject(requeue=False), "reject", "")
        return
    try:
        task = TaskMessage.from_json(message.body)
    except ProtocolError as error:
        log.warning(
            "dead-lettering a malformed task", extra={"group": shared.group, "error": str(error)}
        )
        shared.stats.increment("chime_consumer_malformed_tasks_total")
        await settle(lambda: message.reject(requeue=False), "reject", "")
        return
    ctx = TaskContext(task, shared.instance, publisher=message.app_id)
    loop = asyncio.get_running_loop()
    async with shared.key_locks.hold(ctx.idempotency_key):
        give_up_at = loop.time() + MAX_STORE_WAIT
        backoff = Backoff(0.5, 30.0)
        failure: Optional[Exception] = None
        while True:
            try:
                await _handle(ctx, shared, replies)
                break
            except _Stopping:
                return
            except IdempotencyError as error:
                if loop.time() >= give_up_at:
                    failure = error
                    break
                delay = backoff.next_delay()
                log.warning(
                    "idempotency store unavailable; holding the task",
                    extra={"task_id": str(ctx.task_id), "error": str(error),
                           "retry_in_ms": int(delay * 1000)},
                )
                await asyncio.sleep(delay)
            except ReplyError as error:
                failure = error
                break
        if failure is None:
            await settle(message.ack, "delivery ack", str(ctx.task_id))
            return
        log.warning(
            "task not completed; handing it back to the queue",
            extra={"task_id": str(ctx.task_id), "job": ctx.job, "error": str(failure)},
        )
        await asyncio.sleep(REQUEUE_PAUSE)
        await settle(lambda: message.nack(requeue=True), "requeue", str(ctx.task_id))


async def _handle(ctx: TaskContext, shared: Shared, replies: ReplyPublisher) -> None:
    registered = shared.handlers.for_job(ctx.job)
    if registered is not None and registered.transactional is not None:
        await _run_transactional(ctx, shared, replies, registered)
        return
    try:
        recorded = await shared.store.lookup(ctx.idempotency_key)
    except IdempotencyError:
        raise
    except Exception as error:  # noqa: BLE001 - a custom store's failure is an outage too
        raise IdempotencyError(str(error)) from error
    if recorded is not None:
        _report(ctx, shared, recorded, replayed=True)
        await replies.start_result(ctx, recorded, replayed=True)
        return
    recorded, ack = await _run_plain(ctx, shared, replies, registered)
    if is_final(recorded.outcome):
        try:
            await shared.store.record(ctx.idempotency_key, recorded)
        except Exception as error:  # noqa: BLE001 - the result still goes out
            log.warning(
                "could not record the outcome",
                extra={"task_id": str(ctx.task_id), "error": str(error)},
            )
    _report(ctx, shared, recorded, replayed=False)
    await _send_result_behind(ctx, replies, ack, recorded, replayed=False)


async def _run_plain(
    ctx: TaskContext, shared: Shared, replies: ReplyPublisher, registered: Optional[Registered]
) -> Tuple[RecordedOutcome, "asyncio.Future[None]"]:
    if not await shared.handler_slot():
        raise _Stopping()
    try:
        # Neither the handler nor the result waits for the ack's confirm: the result is
        # published behind it on the same channel, which keeps them in order.
        ack = replies.start_ack(ctx)
        if registered is None:
            outcome: Any = Failed(TaskError(
                f"no handler registered for job {ctx.job!r} in group {ctx.group!r}",
                retryable=False,
            ))
        else:
            handler = registered.handler
            outcome = await _with_heartbeats(
                ctx, shared, replies, lambda running: invoke(handler, running, _thread(ctx))
            )
    finally:
        shared.handler_slots.release()
    return RecordedOutcome(outcome, utc_now()), ack


async def _run_transactional(
    ctx: TaskContext, shared: Shared, replies: ReplyPublisher, registered: Registered
) -> None:
    store, handler = registered.transactional, registered.handler
    assert store is not None, "only called for transactional handlers"
    if not await shared.handler_slot():
        raise _Stopping()
    try:
        ack = replies.start_ack(ctx)

        def work(running: TaskContext) -> Awaitable[Tuple[RecordedOutcome, bool]]:
            if is_async_callable(handler):
                result: Awaitable[Tuple[RecordedOutcome, bool]] = store.execute(handler, running)
                return result
            return run_in_thread(_thread(ctx), store.execute_blocking, handler, running)

        recorded, replayed = await _with_heartbeats(ctx, shared, replies, work)
    finally:
        shared.handler_slots.release()
    _report(ctx, shared, recorded, replayed)
    await _send_result_behind(ctx, replies, ack, recorded, replayed)


async def _with_heartbeats(ctx: TaskContext, shared: Shared, replies: ReplyPublisher, work: Any) -> Any:
    every = heartbeat.interval(shared.heartbeat_interval, ctx.task.run_timeout_ms)
    return await heartbeat.beside(ctx, replies, every, shared.stats, work)


async def _send_result_behind(
    ctx: TaskContext,
    replies: ReplyPublisher,
    ack: "asyncio.Future[None]",
    recorded: RecordedOutcome,
    replayed: bool,
) -> None:
    """Publishes the result right behind the ack, then waits for both confirms. Only the
    result's decides: a confirmed result settles the run whether or not its ack was
    queued; an unconfirmed one raises :class:`ReplyError`."""
    result = replies.start_result(ctx, recorded, replayed)
    try:
        await ack
    except ReplyError as error:
        log.debug(
            "the ack was not confirmed; the result decides",
            extra={"task_id": str(ctx.task_id), "error": str(error)},
        )
    await result


def _thread(ctx: TaskContext) -> str:
    return f"chime-handler-{ctx.job}-{ctx.task_id}"


def _report(ctx: TaskContext, shared: Shared, recorded: RecordedOutcome, replayed: bool) -> None:
    outcome = recorded.outcome
    if isinstance(outcome, Succeeded):
        label = "succeeded"
    elif outcome.error.retryable:
        label = "retryable"
    else:
        label = "failed"
    if replayed:
        shared.stats.increment("chime_consumer_replayed_total")
    shared.stats.increment(
        "chime_consumer_tasks_total", outcome=label, replayed=str(replayed).lower()
    )
    extra = {"task_id": str(ctx.task_id), "job": ctx.job, "attempt": ctx.attempt,
             "outcome": label, "replayed": replayed}
    if isinstance(outcome, Failed):
        extra["error"] = outcome.error.message
        log.info("task failed", extra=extra)
    else:
        log.debug("task finished", extra=extra)
