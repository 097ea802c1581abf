"""Running synchronous code (sync handlers, the sync transactional form) beside the event
loop: one daemon thread per call, so the loop keeps sending heartbeats and taking other
tasks while it runs, and a handler still stuck at the drain timeout cannot keep the
process from exiting (a ``ThreadPoolExecutor`` joins its threads at exit). The
consumer's concurrency bounds how many run at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Callable, Tuple, TypeVar

T = TypeVar("T")


def _settle(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def run_in_thread(name: str, fn: Callable[..., T], *args: Any) -> T:
    """Runs ``fn(*args)`` in a new daemon thread named ``name`` with the caller's
    context variables, and waits for it without blocking the event loop."""
    loop = asyncio.get_running_loop()
    future: "asyncio.Future[T]" = loop.create_future()
    context = contextvars.copy_context()

    def target() -> None:
        ok, value = True, None  # type: Tuple[bool, Any]
        try:
            value = context.run(fn, *args)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            ok, value = False, error
        try:
            loop.call_soon_threadsafe(_settle, future, ok, value)
        except RuntimeError:
            # The loop is closed: nobody waits for this result any more.
            pass

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future
