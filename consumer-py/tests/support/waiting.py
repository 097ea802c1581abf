"""Waiting on conditions with deadlines (never bare sleeps as the assertion)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional, TypeVar, Union

T = TypeVar("T")


async def until(
    what: str, timeout: float, check: Callable[[], Union[Optional[T], Awaitable[Optional[T]]]]
) -> T:
    """Polls ``check`` until it returns something other than ``None``/``False``; fails
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value is not None and value is not False:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        last = value
        await asyncio.sleep(0.1)
