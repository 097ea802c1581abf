"""One connection's worth of consuming: open a publish channel (confirm mode) and a
consume channel, declare the topology, consume every queue of this instance, announce
presence, and drain on shutdown.

The queues: the group's work queue always; the zone's work queue with a zone; the
instance's own broadcast queue with broadcasts (exclusive to the connection, so it is
declared again on every reconnect). Each gets its own ``basic.consume`` with the same
per-consumer prefetch; the handler slots bound how many handlers run across all of them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, Iterator, List, Set

import aio_pika
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractIncomingMessage,
    AbstractQueue,
)

from . import connection as amqp
from . import delivery, presence
from .protocol import topology, user_id
from .replies import ReplyPublisher
from .settings import ConsumerSettings

log = logging.getLogger("chime_consumer")


@dataclass
class Session:
    """An open connection with its channels, consumers and background loops (presence,
    the consumer-cancel watch)."""

    connection: AbstractConnection
    consume_channel: AbstractChannel
    publish_channel: AbstractChannel
    queues: List[AbstractQueue]
    consumer_tags: List[str]
    replies: ReplyPublisher
    background: "List[asyncio.Task[None]]"
    lost: asyncio.Event

    @classmethod
    async def open(
        cls,
        settings: ConsumerSettings,
        shared: delivery.Shared,
        in_flight: "Set[asyncio.Task[Any]]",
    ) -> "Session":
        connection = await amqp.connect(
            settings.amqp_url,
            settings.ssl_context,
            f"chime-consumer/{settings.group}/{settings.instance}",
        )
        try:
            return await cls._start(connection, settings, shared, in_flight)
        except BaseException:
            await amqp.close_quietly(connection)
            raise

    @classmethod
    async def _start(
        cls,
        connection: AbstractConnection,
        settings: ConsumerSettings,
        shared: delivery.Shared,
        in_flight: "Set[asyncio.Task[Any]]",
    ) -> "Session":
        publish_channel = await connection.channel(publisher_confirms=True)
        await topology.declare_replies(connection, publish_channel)
        exchange = await publish_channel.declare_exchange(
            topology.REPLY_EXCHANGE, aio_pika.ExchangeType.DIRECT, durable=True
        )
        consume_channel = await connection.channel(publisher_confirms=False)
        queues = await _declare_queues(connection, consume_channel, settings)
        # Per consumer, not global: quorum queues refuse a global prefetch.
        await consume_channel.set_qos(prefetch_count=settings.prefetch)
        replies = ReplyPublisher(
            exchange,
            settings.instance,
            settings.batch_replies,
            shared.stats,
            user_id.connection_user(settings.amqp_url),
        )
        lost = asyncio.Event()
        amqp.watch(lost, connection, publish_channel, consume_channel)

        async def on_message(message: AbstractIncomingMessage) -> None:
            with tracked(in_flight):
                await delivery.process(message, shared, replies)

        tags = []
        for queue in queues:
            tag = f"{settings.instance}:{uuid.uuid4().hex}"
            tags.append(await queue.consume(on_message, consumer_tag=tag))
        watching = await amqp.watch_consumer_cancel(consume_channel, tags, lost)
        announcing = asyncio.ensure_future(
            presence.announce_forever(
                replies, settings.group, settings.zone, settings.broadcast, shared.stats
            )
        )
        return cls(
            connection=connection,
            consume_channel=consume_channel,
            publish_channel=publish_channel,
            queues=queues,
            consumer_tags=tags,
            replies=replies,
            background=[announcing, watching],
            lost=lost,
        )

    @property
    def queue_names(self) -> List[str]:
        return [queue.name for queue in self.queues]

    async def wait(self, stop: asyncio.Event) -> bool:
        """Waits until shutdown is asked (``True``) or the session is lost (``False``)."""
        return await amqp.stopped_or_lost(stop, self.lost)

    async def drain(self, in_flight: "Set[asyncio.Task[Any]]", timeout: float) -> None:
        """Stops presence and new deliveries, waits for running handlers to report and
        acknowledge (up to ``timeout``), then closes. Deliveries prefetched but not
        started go back to their queues with the close."""
        for task in self.background:
            task.cancel()
        for queue, tag in zip(self.queues, self.consumer_tags):
            try:
                await queue.cancel(tag)
            except Exception as error:  # noqa: BLE001 - closing anyway
                log.warning(
                    "could not cancel the consumer; closing anyway",
                    extra={"queue": queue.name, "error": str(error)},
                )
        await wait_in_flight(in_flight, timeout)
        await self.replies.close()
        await amqp.close_quietly(self.consume_channel, self.publish_channel, self.connection)
        log.info("consumer stopped")

    async def abandon(self) -> None:
        """Closes what is left of a lost session."""
        for task in self.background:
            task.cancel()
        await self.replies.close()
        await amqp.close_quietly(self.consume_channel, self.publish_channel, self.connection)


@contextmanager
def tracked(in_flight: "Set[asyncio.Task[Any]]") -> Iterator[None]:
    """Counts the current task in ``in_flight`` (what a drain waits for) for the block."""
    task = asyncio.current_task()
    if task is not None:
        in_flight.add(task)
    try:
        yield
    finally:
        if task is not None:
            in_flight.discard(task)


async def wait_in_flight(in_flight: "Set[asyncio.Task[Any]]", timeout: float) -> None:
    """Waits up to ``timeout`` for every running delivery to finish."""
    current = asyncio.current_task()
    pending = {task for task in in_flight if task is not current}
    if not pending:
        return
    _, still = await asyncio.wait(pending, timeout=timeout)
    if still:
        log.warning(
            "handlers still running at the drain timeout; their tasks will be redelivered",
            extra={"running": len(still), "timeout_ms": int(timeout * 1000)},
        )


async def _declare_queues(
    connection: AbstractConnection, channel: AbstractChannel, settings: ConsumerSettings
) -> List[AbstractQueue]:
    await topology.declare_group(connection, channel, settings.group)
    names = [topology.group_queue(settings.group)]
    if settings.zone is not None:
        await topology.declare_zone(connection, channel, settings.group, settings.zone)
        names.append(topology.zone_queue(settings.group, settings.zone))
    if settings.broadcast:
        names.append(
            await topology.declare_instance_queue(connection, channel, settings.group, settings.instance)
        )
    # The queues exist now; these are handles to consume them, without redeclaring.
    return [await channel.get_queue(name, ensure=False) for name in names]


