"""Observers: read-only subscribers that receive a copy of every task whose
``<app>.<job>`` matches one of their topic patterns, whichever group runs it
(``docs/routing.md``, "Observers").

An observer named ``name`` owns the durable quorum queue ``chime.observe.<name>``, bound
to ``chime.topics`` with each pattern (``shop.*``, ``*.close-orders``, ``#``). It
registers its patterns with ``chimed`` (an ``observe`` reply, confirmed before it
consumes, repeated every 10 minutes), because copies are published only for registered
patterns. It sends nothing else: no ack, result or presence, so it cannot affect a run.

Outcomes of the handler (``handler(task: TaskMessage)``, async or sync): returning
acknowledges the copy; :class:`~chime_consumer.RetryableError` hands it back to the queue
after a pause (dead-lettered after the queue's delivery limit); any other exception, or a
body that is not a task, rejects it to ``chime.observe.<name>.dlq``. Copies arrive for
every publish: dedupe by ``task_id`` (and ``attempt``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Set

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from . import connection as amqp
from .backoff import Backoff
from .delivery import REQUEUE_PAUSE, settle
from .errors import ConfigError, RetryableError
from .handlers import failure_of, is_async_callable
from .protocol import topology
from .protocol.messages import MAX_OBSERVER_PATTERNS, OBSERVE_INTERVAL_MS, ProtocolError, TaskMessage
from .protocol.user_id import connection_user
from .replies import ReplyPublisher
from .session import tracked, wait_in_flight
from .settings import check_count, check_name, check_seconds
from .shutdown import StopSignal
from .stats import Counters
from .threads import run_in_thread

log = logging.getLogger("chime_consumer")

#: A copy's handler: ``def observe(task)`` or ``async def observe(task)``.
ObserveHandler = Callable[[TaskMessage], Any]


class Observer:
    """A read-only subscriber named ``name`` to copies of the tasks matching
    ``patterns``. Options: ``concurrency`` (default 1: copies are handled one after the
    other, in queue order), ``prefetch`` (default twice the concurrency),
    ``drain_timeout`` (default 30 s), ``ssl_context``."""

    def __init__(
        self,
        amqp_url: str,
        name: str,
        patterns: Sequence[str],
        handler: Optional[ObserveHandler] = None,
        *,
        concurrency: int = 1,
        prefetch: Optional[int] = None,
        drain_timeout: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        amqp.check_url(amqp_url, ssl_context)
        check_name("observer", name)
        unique: List[str] = []
        for pattern in patterns:
            if pattern not in unique:
                unique.append(pattern)
        if not unique:
            raise ConfigError("patterns", "subscribe to at least one pattern")
        if len(unique) > MAX_OBSERVER_PATTERNS:
            raise ConfigError("patterns", f"at most {MAX_OBSERVER_PATTERNS} patterns per observer")
        for pattern in unique:
            if not topology.is_valid_topic_pattern(pattern):
                raise ConfigError(
                    "patterns",
                    f"{pattern!r}: use dot-separated words, each a name, '*' (one word) "
                    "or '#' (any number of words)",
                )
        check_count("concurrency", concurrency, 65535)
        prefetch = min(concurrency * 2, 65535) if prefetch is None else prefetch
        check_count("prefetch", prefetch, 65535)
        check_seconds("drain_timeout", drain_timeout)
        self.amqp_url = amqp_url
        self.name = name
        self.patterns = tuple(unique)
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.drain_timeout = float(drain_timeout)
        self.ssl_context = ssl_context
        self._handler = handler
        self.stats = Counters()
        self._stop: Optional[StopSignal] = None

    @property
    def queue(self) -> str:
        """The observer's queue, ``chime.observe.<name>``."""
        return topology.observer_queue(self.name)

    def handler(self, fn: ObserveHandler) -> ObserveHandler:
        """Sets the handler (a decorator)."""
        self._handler = fn
        return fn

    def run(self) -> None:
        """Runs until SIGTERM or SIGINT, then drains. Blocks."""
        asyncio.run(self.serve())

    def request_stop(self) -> None:
        """Asks a running observer to drain and stop; callable from any thread."""
        if self._stop is not None:
            self._stop.request()

    async def serve(self, until: Optional[Awaitable[object]] = None) -> None:
        """Runs until ``until`` completes (default: SIGTERM or SIGINT); reconnects with
        backoff when the broker goes away."""
        if self._handler is None:
            raise ConfigError("handler", "set one with @observer.handler")
        stop = self._stop = StopSignal()
        stop.listen(until)
        slots = asyncio.Semaphore(self.concurrency)
        in_flight: "Set[asyncio.Task[Any]]" = set()
        backoff = Backoff()
        try:
            while not stop.event.is_set():
                try:
                    session = await self._open(slots, in_flight)
                except Exception as error:  # noqa: BLE001 - retried with backoff
                    delay = backoff.next_delay()
                    log.warning(
                        "cannot reach rabbitmq; retrying",
                        extra={"observer": self.name, "error": f"{type(error).__name__}: {error}",
                               "retry_in_ms": int(delay * 1000)},
                    )
                    self.stats.increment("chime_observer_reconnects_total")
                    await amqp.pause_unless_stopped(stop.event, delay)
                    continue
                backoff.reset()
                log.info("observing", extra={"observer": self.name, "queue": self.queue,
                                             "patterns": list(self.patterns)})
                stopped = await session.wait(stop.event)
                await session.close(in_flight, self.drain_timeout if stopped else 0.0)
                if stopped:
                    log.info("observer stopped", extra={"observer": self.name})
                    return
                log.warning("lost rabbitmq session; reconnecting", extra={"observer": self.name})
                self.stats.increment("chime_observer_reconnects_total")
            await wait_in_flight(in_flight, self.drain_timeout)
        finally:
            stop.close()
            self._stop = None

    async def _open(self, slots: asyncio.Semaphore, in_flight: "Set[asyncio.Task[Any]]") -> "_Session":
        connection = await amqp.connect(self.amqp_url, self.ssl_context, f"chime-observer/{self.name}")
        try:
            channel = await connection.channel(publisher_confirms=False)
            await topology.declare_observer(connection, channel, self.name, self.patterns)
            publish_channel = await connection.channel(publisher_confirms=True)
            await topology.declare_replies(connection, publish_channel)
            exchange = await publish_channel.declare_exchange(
                topology.REPLY_EXCHANGE, aio_pika.ExchangeType.DIRECT, durable=True
            )
            # One registration at a time: nothing to batch.
            replies = ReplyPublisher(exchange, self.name, batch=False, stats=self.stats,
                                     user_id=connection_user(self.amqp_url))
            await self._register(replies)
            await channel.set_qos(prefetch_count=self.prefetch)
            queue = await channel.get_queue(self.queue, ensure=False)
            lost = asyncio.Event()
            amqp.watch(lost, connection, channel, publish_channel)
            handler = self._handler
            assert handler is not None

            async def on_copy(message: AbstractIncomingMessage) -> None:
                with tracked(in_flight):
                    async with slots:
                        await self._observe(message, handler)

            tag = await queue.consume(on_copy, consumer_tag=f"observer:{self.name}:{uuid.uuid4().hex}")
            watching = await amqp.watch_consumer_cancel(channel, [tag], lost)
            registering = asyncio.ensure_future(self._register_forever(replies))
        except BaseException:
            await amqp.close_quietly(connection)
            raise
        return _Session(connection, [channel, publish_channel], queue, tag, replies,
                        [registering, watching], lost)

    async def _register(self, replies: ReplyPublisher) -> None:
        try:
            await replies.send_observe(self.name, self.patterns)
        except Exception:
            self.stats.increment("chime_observer_registrations_total", outcome="failed")
            raise
        self.stats.increment("chime_observer_registrations_total", outcome="sent")

    async def _register_forever(self, replies: ReplyPublisher) -> None:
        while True:
            await asyncio.sleep(OBSERVE_INTERVAL_MS / 1000)
            try:
                await self._register(replies)
            except Exception as error:  # noqa: BLE001 - the pattern stays registered 7 days
                log.warning("observer registration not confirmed",
                            extra={"observer": self.name, "error": str(error)})

    async def _observe(self, message: AbstractIncomingMessage, handler: ObserveHandler) -> None:
        try:
            task = TaskMessage.from_json(message.body)
        except ProtocolError as error:
            log.warning("dead-lettering a copy that is not a task",
                        extra={"observer": self.name, "error": str(error)})
            self.stats.increment("chime_observer_malformed_total")
            await settle(lambda: message.reject(requeue=False), "reject", "")
            return
        try:
            if is_async_callable(handler):
                await handler(task)
            else:
                await run_in_thread(f"chime-observer-{self.name}", handler, task)
            outcome = "observed"
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - settles the copy, never escapes
            outcome = "retry" if isinstance(error, RetryableError) else "dead_lettered"
            log.warning("observer handler failed",
                        extra={"observer": self.name, "task_id": str(task.task_id), "app": task.app,
                               "job": task.job, "outcome": outcome,
                               "error": failure_of(error).message})
        self.stats.increment("chime_observer_copies_total", outcome=outcome)
        task_id = str(task.task_id)
        if outcome == "observed":
            await settle(message.ack, "copy ack", task_id)
        elif outcome == "retry":
            await asyncio.sleep(REQUEUE_PAUSE)
            await settle(lambda: message.nack(requeue=True), "copy requeue", task_id)
        else:
            await settle(lambda: message.reject(requeue=False), "copy reject", task_id)


class _Session:
    """One connection's worth of observing."""

    def __init__(self, connection: Any, channels: List[Any], queue: Any, tag: str,
                 replies: ReplyPublisher, background: "List[asyncio.Task[None]]",
                 lost: asyncio.Event) -> None:
        self.connection, self.channels, self.queue, self.tag = connection, channels, queue, tag
        self.replies, self.background, self.lost = replies, background, lost

    async def wait(self, stop: asyncio.Event) -> bool:
        return await amqp.stopped_or_lost(stop, self.lost)

    async def close(self, in_flight: "Set[asyncio.Task[Any]]", drain_timeout: float) -> None:
        for task in self.background:
            task.cancel()
        if drain_timeout > 0:
            try:
                await self.queue.cancel(self.tag)
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            await wait_in_flight(in_flight, drain_timeout)
        await self.replies.close()
        await amqp.close_quietly(*self.channels, self.connection)
