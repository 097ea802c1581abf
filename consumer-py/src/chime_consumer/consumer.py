"""The consumer: a member of a consumer group that runs the tasks Chime fires.

It connects to RabbitMQ, consumes the instance's queues (the group's work queue, and
with ``zone=`` / ``broadcast=True`` its zone's queue and its own broadcast queue), runs
handlers with bounded concurrency, reports acks, heartbeats and results, announces
itself with presence messages, reconnects with backoff when the broker goes away, and
drains running handlers on SIGTERM. See :mod:`.delivery` for one task's path.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any, Awaitable, Callable, Optional, Set, TypeVar, overload

from . import connection as amqp
from .backoff import Backoff
from .delivery import Shared
from .errors import ConfigError
from .handlers import Handlers, Registered, is_async_callable
from .idempotency import IdempotencyStore, MemoryStore
from .session import Session, wait_in_flight
from .settings import ConsumerSettings, check_name
from .shutdown import StopSignal
from .stats import Counters

log = logging.getLogger("chime_consumer")

F = TypeVar("F", bound=Callable[..., Any])


class Consumer:
    """A running member of consumer group ``group`` on the broker at ``amqp_url``.

    Options (all keyword-only, with their defaults):

    - ``instance``: this instance's id, reported on every reply and part of its
      broadcast queue's name; 1-128 printable ASCII characters without spaces, unique
      among the group's live instances. Default ``CHIME_INSTANCE``, else
      ``<hostname>-<pid>``.
    - ``zone``: also consume the zone's work queue (``zone``-mode jobs). Default
      ``CHIME_ZONE``, else none.
    - ``broadcast``: also consume the group's broadcasts from this instance's own queue.
      Default ``False``.
    - ``concurrency``: handlers running at once (default 8). ``prefetch``: deliveries
      RabbitMQ may push ahead per queue consumed (default twice the concurrency).
    - ``drain_timeout``: seconds shutdown waits for running handlers (default 30).
    - ``heartbeat_interval``: seconds between heartbeats of a running handler (default
      10, and at least three per run timeout of the job).
    - ``batch_replies``: send replies that queue up as one batch message (default on;
      off only while a ``chimed`` older than batches runs).
    - ``idempotency_store``: where outcomes are remembered (default a
      :class:`~chime_consumer.idempotency.MemoryStore`).
    - ``ssl_context``: TLS settings for an ``amqps://`` URL (see
      :func:`~chime_consumer.tls_context`).
    - ``scheduler_user``: the RabbitMQ user ``chimed`` publishes tasks as. When set, a
      task whose broker-validated ``user_id`` is missing or another user's is not run:
      it is dead-lettered (rejected without requeue), logged at WARN and counted in
      ``chime_consumer_refused_tasks_total{reason="user"}``. Default
      ``CHIME_SCHEDULER_USER`` if set and not empty, else none (tasks from any user run).

    Every reply, heartbeat and presence message carries the ``user_id`` of the
    connection's user (from ``amqp_url``; none with ``auth=external``), for a ``chimed``
    that checks ``reply_users``.

    Handlers are registered by job name with :meth:`handler` (a decorator), and run with
    :meth:`run` (blocking) or :meth:`serve` (async).
    """

    def __init__(
        self,
        amqp_url: str,
        group: str,
        *,
        instance: Optional[str] = None,
        zone: Optional[str] = None,
        broadcast: bool = False,
        concurrency: int = 8,
        prefetch: Optional[int] = None,
        drain_timeout: float = 30.0,
        heartbeat_interval: float = 10.0,
        batch_replies: bool = True,
        idempotency_store: Optional[IdempotencyStore] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        scheduler_user: Optional[str] = None,
    ) -> None:
        self.settings = ConsumerSettings.build(
            amqp_url,
            group,
            instance=instance,
            zone=zone,
            broadcast=broadcast,
            concurrency=concurrency,
            prefetch=prefetch,
            drain_timeout=drain_timeout,
            heartbeat_interval=heartbeat_interval,
            batch_replies=batch_replies,
            ssl_context=ssl_context,
            scheduler_user=scheduler_user,
        )
        store = idempotency_store if idempotency_store is not None else MemoryStore()
        if not isinstance(store, IdempotencyStore):
            raise ConfigError("idempotency_store", "needs async lookup(key) and record(key, outcome)")
        self.idempotency_store: IdempotencyStore = store
        self.handlers = Handlers()
        #: What this consumer did, by counter name (see :class:`~chime_consumer.stats.Counters`).
        self.stats = Counters()
        self._stop: Optional[StopSignal] = None
        #: Set while a session is consuming (created by :meth:`serve`); for health checks.
        self.consuming: Optional[asyncio.Event] = None

    @property
    def instance(self) -> str:
        """This instance's id."""
        return self.settings.instance

    @property
    def group(self) -> str:
        """The group this consumer belongs to."""
        return self.settings.group

    @overload
    def handler(self, job: str) -> Callable[[F], F]: ...

    @overload
    def handler(self, job: str, fn: F) -> F: ...

    def handler(self, job: str, fn: Optional[F] = None) -> Any:
        """Runs ``fn`` for tasks of job ``job`` (the job's name, in any app). Use as
        ``@consumer.handler("close-expired-orders")`` or call with the function."""
        check_name("job", job)

        def register(fn: F) -> F:
            self.handlers.by_job[job] = Registered(fn)
            return fn

        return register if fn is None else register(fn)

    def fallback_handler(self, fn: F) -> F:
        """Runs ``fn`` for every job without a handler of its own (a decorator). Without
        one, such a task fails permanently with "no handler registered"."""
        self.handlers.fallback = Registered(fn)
        return fn

    def transactional_handler(self, job: str, store: Any) -> Callable[[F], F]:
        """Runs the decorated ``handler(ctx, conn)`` for tasks of ``job`` inside a
        PostgreSQL transaction of ``store`` (a
        :class:`~chime_consumer.idempotency.PostgresIdempotencyStore`) that also records
        the task's idempotency key, so its writes through ``conn`` happen exactly once
        across every instance. ``async def`` handlers get a ``psycopg.AsyncConnection``,
        plain ones a ``psycopg.Connection`` (in a thread). Do not commit: the library
        commits the handler's writes with the key, or rolls them back on failure."""
        check_name("job", job)
        if not (hasattr(store, "execute") and hasattr(store, "execute_blocking")):
            raise ConfigError("store", "a transactional handler needs a PostgresIdempotencyStore")

        def register(fn: F) -> F:
            self.handlers.by_job[job] = Registered(fn, transactional=store)
            return fn

        return register

    def run(self) -> None:
        """Runs until SIGTERM or SIGINT (Ctrl-C), then drains running handlers. Blocks;
        from async code use :meth:`serve`."""
        asyncio.run(self.serve())

    def request_stop(self) -> None:
        """Asks a running consumer to drain and stop; callable from any thread."""
        if self._stop is not None:
            self._stop.request()

    async def serve(self, until: Optional[Awaitable[object]] = None) -> None:
        """Runs until ``until`` completes (default: SIGTERM or SIGINT), then stops taking
        tasks, lets running handlers finish (up to the drain timeout) and closes. Broker
        failures never end it: it reconnects with backoff."""
        if not self.handlers:
            raise ConfigError("handlers", "no handlers registered: add one with @consumer.handler(job)")
        await self._open_stores()
        settings = self.settings
        stop = self._stop = StopSignal()
        stop.listen(until)
        self.consuming = asyncio.Event()
        shared = Shared(
            group=settings.group,
            instance=settings.instance,
            heartbeat_interval=settings.heartbeat_interval,
            store=self.idempotency_store,
            handlers=self.handlers,
            stats=self.stats,
            handler_slots=asyncio.Semaphore(settings.concurrency),
            scheduler_user=settings.scheduler_user,
        )
        in_flight: "Set[asyncio.Task[Any]]" = set()
        backoff = Backoff()
        try:
            while not stop.event.is_set():
                session = await self._open_session(shared, in_flight, backoff, stop.event)
                if session is None:
                    continue
                backoff.reset()
                log.info(
                    "consuming",
                    extra={"group": settings.group, "instance": settings.instance,
                           "zone": settings.zone, "broadcast": settings.broadcast,
                           "queues": session.queue_names, "concurrency": settings.concurrency,
                           "prefetch": settings.prefetch,
                           "broker": amqp.describe(settings.amqp_url)},
                )
                self.consuming.set()
                stopped = await session.wait(stop.event)
                self.consuming.clear()
                if stopped:
                    shared.stopping.set()
                    await session.drain(in_flight, settings.drain_timeout)
                    return
                log.warning("lost rabbitmq session; reconnecting", extra={"group": settings.group})
                self.stats.increment("chime_consumer_reconnects_total")
                await session.abandon()
            shared.stopping.set()
            await wait_in_flight(in_flight, settings.drain_timeout)
        finally:
            stop.close()
            self._stop = None

    async def _open_session(
        self,
        shared: Shared,
        in_flight: "Set[asyncio.Task[Any]]",
        backoff: Backoff,
        stop: asyncio.Event,
    ) -> Optional[Session]:
        """A new session, or ``None`` after a failed attempt's backoff (or on stop)."""
        opening = asyncio.ensure_future(Session.open(self.settings, shared, in_flight))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({opening, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not opening.done():
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            return None
        error = opening.exception()
        if error is None:
            return opening.result()
        delay = backoff.next_delay()
        log.warning(
            "cannot reach rabbitmq; retrying",
            extra={"group": self.settings.group, "error": f"{type(error).__name__}: {error}",
                   "attempt": backoff.attempts, "retry_in_ms": int(delay * 1000),
                   "broker": amqp.describe(self.settings.amqp_url)},
        )
        self.stats.increment("chime_consumer_reconnects_total")
        await amqp.pause_unless_stopped(stop, delay)
        return None

    async def _open_stores(self) -> None:
        stores = [self.idempotency_store]
        stores += [r.transactional for r in self.handlers.by_job.values() if r.transactional]
        for store in stores:
            opener = getattr(store, "open", None)
            if opener is not None and is_async_callable(opener):
                await opener()

