"""Heartbeats while a handler runs: they tell the scheduler the task is alive (each one
moves the run's deadline to its run timeout from then) and carry the handler's progress.
Sent every ``heartbeat_interval`` (default 10 s), never less often than three times per
run timeout, and soon after the handler reports progress."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional, TypeVar

from .context import TaskContext
from .protocol.messages import Progress
from .replies import ReplyError, ReplyPublisher
from .stats import Counters

log = logging.getLogger("chime_consumer")

#: Shortest gap between two heartbeats, however often progress is reported.
MIN_GAP = 0.2

T = TypeVar("T")


def interval(configured: float, run_timeout_ms: Optional[int]) -> float:
    """The configured interval, but at least three heartbeats per run timeout, so one lost
    heartbeat never lets the deadline pass; never more often than :data:`MIN_GAP`."""
    bound = configured if run_timeout_ms is None else run_timeout_ms / 3000
    return max(min(configured, bound), MIN_GAP)


class _Progress:
    """The latest progress report and a wake-up for the heartbeat loop."""

    def __init__(self) -> None:
        self.latest: Optional[Progress] = None
        self.changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def report(self, progress: Progress) -> None:
        # Called from the handler: on the loop, or from a sync handler's thread.
        try:
            self._loop.call_soon_threadsafe(self._apply, progress)
        except RuntimeError:
            pass  # the loop is closed; nobody sends heartbeats any more

    def _apply(self, progress: Progress) -> None:
        self.latest = progress
        self.changed.set()


async def beside(
    ctx: TaskContext,
    replies: ReplyPublisher,
    every: float,
    stats: Counters,
    work: Callable[[TaskContext], Awaitable[T]],
) -> T:
    """Runs ``work`` with a context wired to report progress, sending heartbeats for
    ``ctx`` every ``every`` seconds (and soon after progress) until ``work`` finishes."""
    progress = _Progress()
    running = TaskContext(ctx.task, ctx.consumer, ctx.publisher, progress=progress.report)
    beats = asyncio.ensure_future(_beat(running, replies, every, progress, stats))
    try:
        return await work(running)
    finally:
        beats.cancel()


async def _beat(
    ctx: TaskContext,
    replies: ReplyPublisher,
    every: float,
    progress: _Progress,
    stats: Counters,
) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time() + every
    while True:
        try:
            await asyncio.wait_for(progress.changed.wait(), max(0.0, next_at - loop.time()))
            progress.changed.clear()
            # Coalesce a burst of reports into one heartbeat.
            await asyncio.sleep(MIN_GAP)
        except asyncio.TimeoutError:
            pass
        try:
            await replies.send_heartbeat(ctx, progress.latest)
        except ReplyError as error:
            # Not fatal: the next one may get through, and the result settles the run.
            log.debug(
                "heartbeat not confirmed", extra={"task_id": str(ctx.task_id), "error": str(error)}
            )
        stats.increment("chime_consumer_heartbeats_total")
        next_at = loop.time() + every
