"""Publishing acks, results, heartbeats, presence and observer registrations to the
scheduler, each confirmed by the broker.

One task per channel publishes everything queued to it, in order. While
:data:`MAX_BATCHES_IN_FLIGHT` messages await their confirms, new replies wait; the next
message then carries all of them as one batch (``docs/protocol.md``, "Batch"), like the
Rust library: a quiet consumer sends each reply alone, a busy one fewer, larger
messages. With ``batch=False`` every reply is its own message, for a ``chimed`` older
than batches.

Every message carries the ``user_id`` property of the connection's RabbitMQ user
(:func:`~chime_consumer.protocol.user_id.connection_user`), which the broker validates,
so a ``chimed`` with ``reply_users`` can tell which user answered (``docs/security.md``,
"Authenticated messages"). Without a known user (EXTERNAL authentication) nothing is
stamped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Set

import aio_pika
import aiormq
from aio_pika.abc import AbstractExchange

from .protocol import topology
from .protocol.messages import (
    AckMessage,
    HeartbeatMessage,
    ObserveMessage,
    PresenceMessage,
    Progress,
    RecordedOutcome,
    Reply,
    ResultMessage,
    batch_body,
    reply_to_json,
    within_limits,
)
from .protocol.times import utc_now
from .stats import Counters

if TYPE_CHECKING:
    from .context import TaskContext


def library_version() -> str:
    """What presence messages report as ``version``: ``chime-consumer-py/<version>``."""
    # Imported here: the package's __init__ imports this module.
    from . import __version__

    return f"chime-consumer-py/{__version__}"


log = logging.getLogger("chime_consumer")

#: Messages published and not yet confirmed before further replies wait to be batched.
MAX_BATCHES_IN_FLIGHT = 4
#: Most replies in one batch.
MAX_BATCH_REPLIES = 200
#: A batch is closed once its replies reach this size.
MAX_BATCH_BYTES = 256 * 1024
#: How long to wait for the broker's confirm of a reply before treating it as lost.
CONFIRM_TIMEOUT = 30.0


class ReplyError(Exception):
    """A reply was not confirmed: nacked, unroutable, timed out, or its channel is gone."""


@dataclass
class _Queued:
    body: bytes
    message_id: str
    confirmed: "asyncio.Future[None]"


def reply_message(body: bytes, message_id: str, user_id: Optional[str]) -> aio_pika.Message:
    """A reply as published: JSON, persistent, with ``message_id`` and, when known, the
    connection's ``user_id``."""
    return aio_pika.Message(
        body,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=message_id,
        user_id=user_id,
    )


def _retrieve(future: "asyncio.Future[None]") -> None:
    # A reply nobody waits for (a heartbeat cut short) must not log "never retrieved".
    if not future.cancelled():
        future.exception()


class ReplyPublisher:
    """Queues replies for the channel's publishing task; see the module docs. Every
    message is stamped with ``user_id`` (the connection's user) when it is not ``None``."""

    def __init__(
        self,
        exchange: AbstractExchange,
        instance: str,
        batch: bool,
        stats: Counters,
        user_id: Optional[str],
    ) -> None:
        self._exchange = exchange
        self.instance = instance
        self.user_id = user_id
        self._stats = stats
        self._max_replies = MAX_BATCH_REPLIES if batch else 1
        self._max_in_flight = MAX_BATCHES_IN_FLIGHT if batch else 1_000_000
        self._queue: "asyncio.Queue[Optional[_Queued]]" = asyncio.Queue()
        self._in_flight: "Set[asyncio.Task[None]]" = set()
        self._task = asyncio.ensure_future(self._publish_queued())

    def start(self, reply: Reply) -> "asyncio.Future[None]":
        """Queues ``reply`` and returns the future of its confirm (a :class:`ReplyError`
        when it was not confirmed) without waiting for it."""
        if isinstance(reply, PresenceMessage):
            message_id = "presence"
        elif isinstance(reply, ObserveMessage):
            message_id = "observe"
        else:
            message_id = str(reply.task_id)
        confirmed: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        confirmed.add_done_callback(_retrieve)
        if self._task.done():
            confirmed.set_exception(ReplyError("the reply publisher stopped"))
        else:
            self._queue.put_nowait(_Queued(reply_to_json(reply), message_id, confirmed))
        return confirmed

    async def send(self, reply: Reply) -> None:
        """Publishes ``reply`` and waits for the broker's confirm."""
        await self.start(reply)

    def start_ack(self, ctx: "TaskContext") -> "asyncio.Future[None]":
        """Publishes the task's ack without waiting for its confirm."""
        return self.start(AckMessage(ctx.task_id, ctx.attempt, self.instance, utc_now()))

    def start_result(
        self, ctx: "TaskContext", recorded: RecordedOutcome, replayed: bool
    ) -> "asyncio.Future[None]":
        """Publishes the task's result without waiting for its confirm. An output the
        scheduler could not take (see :func:`within_limits`) is sent as a permanent
        failure."""
        outcome = within_limits(recorded.outcome)
        if outcome is not recorded.outcome:
            log.warning(
                "handler output over the protocol's limits; reporting a permanent failure",
                extra={"task_id": str(ctx.task_id)},
            )
        return self.start(
            ResultMessage(
                task_id=ctx.task_id,
                attempt=ctx.attempt,
                consumer=self.instance,
                finished_at=recorded.finished_at,
                outcome=outcome,
                replayed=replayed,
            )
        )

    async def send_heartbeat(self, ctx: "TaskContext", progress: Optional[Progress]) -> None:
        await self.send(
            HeartbeatMessage(ctx.task_id, ctx.attempt, self.instance, utc_now(), progress)
        )

    async def send_presence(self, group: str, zone: Optional[str], broadcast: bool) -> None:
        await self.send(
            PresenceMessage(
                self.instance,
                group,
                utc_now(),
                zone=zone,
                broadcast=broadcast,
                version=library_version(),
            )
        )

    async def send_observe(self, observer: str, patterns: Sequence[str]) -> None:
        await self.send(ObserveMessage(observer, tuple(patterns), utc_now()))

    async def close(self) -> None:
        """Publishes what is queued, waits for the last confirms, and stops."""
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CONFIRM_TIMEOUT)
        except asyncio.TimeoutError:
            self._task.cancel()

    async def _publish_queued(self) -> None:
        open_ = True
        while open_:
            while len(self._in_flight) >= self._max_in_flight:
                await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
            first = await self._queue.get()
            if first is None:
                break
            batch = [first]
            size = len(first.body)
            while len(batch) < self._max_replies and size < MAX_BATCH_BYTES:
                try:
                    more = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if more is None:
                    open_ = False
                    break
                batch.append(more)
                size += len(more.body)
            task = asyncio.ensure_future(self._publish(batch))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if self._in_flight:
            await asyncio.wait(self._in_flight)
        # Anything queued behind the close is not sent.
        while not self._queue.empty():
            left = self._queue.get_nowait()
            if left is not None and not left.confirmed.done():
                left.confirmed.set_exception(ReplyError("the reply publisher stopped"))

    async def _publish(self, batch: List[_Queued]) -> None:
        if len(batch) == 1:
            body, message_id = batch[0].body, batch[0].message_id
        else:
            body, message_id = batch_body([q.body for q in batch]), "batch"
            self._stats.increment("chime_consumer_reply_batches_total")
        self._stats.increment("chime_consumer_replies_total", len(batch))
        error: Optional[ReplyError] = None
        try:
            confirmation = await asyncio.wait_for(
                self._exchange.publish(
                    reply_message(body, message_id, self.user_id),
                    topology.REPLY_ROUTING_KEY,
                    mandatory=True,
                ),
                CONFIRM_TIMEOUT,
            )
            if not isinstance(confirmation, aiormq.spec.Basic.Ack):
                error = ReplyError("reply was unroutable (is the reply queue declared?)")
        except asyncio.TimeoutError:
            error = ReplyError(f"no confirm within {CONFIRM_TIMEOUT:.0f}s")
        except aiormq.exceptions.DeliveryError:
            error = ReplyError("broker nacked the reply")
        except asyncio.CancelledError:
            error = ReplyError("the reply publisher stopped")
        except Exception as failure:  # noqa: BLE001 - channel or connection gone
            error = ReplyError(f"rabbitmq error: {failure}")
        for queued in batch:
            if queued.confirmed.done():
                continue
            if error is None:
                queued.confirmed.set_result(None)
            else:
                queued.confirmed.set_exception(error)
