"""Handlers as registered by job name, and turning what a handler does into the outcome
reported to the scheduler.

A handler is a function of a :class:`~chime_consumer.TaskContext`. ``async def``
handlers run on the event loop; plain functions run in a thread of their own
(:mod:`.threads`), so blocking code (database drivers, HTTP clients) never stalls the
loop. It returns its output (any JSON value, shown on the run; ``None`` for none) or
raises: :class:`~chime_consumer.RetryableError`, :class:`~chime_consumer.PermanentError`,
or anything else, which is a permanent failure.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from .context import TaskContext
from .errors import HandlerError, RetryableError
from .protocol.messages import Failed, Succeeded, TaskError, TaskOutcome
from .threads import run_in_thread

#: A handler: ``def handler(ctx) -> output`` or ``async def handler(ctx) -> output``.
Handler = Callable[[TaskContext], Any]


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns a coroutine (``async def``, a ``functools.partial``
    of one, or an object with an ``async def __call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    )


def failure_of(error: BaseException) -> TaskError:
    """The wire failure for an exception a handler raised."""
    if isinstance(error, RetryableError):
        return TaskError(error.message, retryable=True, retry_after_ms=error.retry_after_ms)
    if isinstance(error, HandlerError):
        return TaskError(error.message, retryable=False)
    return TaskError(f"handler raised {type(error).__name__}: {error}", retryable=False)


def success_of(output: Any) -> TaskOutcome:
    """The outcome of a handler that returned ``output``: a success when it is JSON, a
    permanent failure when it cannot be sent (retrying would return the same)."""
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError) as error:
        return Failed(TaskError(f"handler output is not JSON: {error}", retryable=False))
    return Succeeded(output)


async def invoke(handler: Handler, ctx: TaskContext, thread_name: str) -> TaskOutcome:
    """Runs ``handler`` on ``ctx`` (async on the loop, sync in a thread) and returns its
    outcome. Every exception becomes a failure, so one bad task never takes the
    consumer down; only cancellation (shutdown) goes through."""
    try:
        if is_async_callable(handler):
            output = await handler(ctx)
        else:
            output = await run_in_thread(thread_name, handler, ctx)
            if inspect.isawaitable(output):
                output = await output
    except asyncio.CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - every failure is reported, none escapes
        return Failed(failure_of(error))
    return success_of(output)


@dataclass(frozen=True)
class Registered:
    """A handler as registered for a job: plain, or transactional with its store."""

    handler: Callable[..., Any]
    transactional: Optional[Any] = None


class Handlers:
    """Handlers by job name, and the one for every other job."""

    def __init__(self) -> None:
        self.by_job: Dict[str, Registered] = {}
        self.fallback: Optional[Registered] = None

    def for_job(self, job: str) -> Optional[Registered]:
        """The handler for tasks of ``job``, or the fallback."""
        return self.by_job.get(job, self.fallback)

    def __bool__(self) -> bool:
        return bool(self.by_job) or self.fallback is not None


