"""Stopping a consumer or observer: on SIGTERM or SIGINT (Ctrl-C) when it runs in the
main thread, when an awaitable the application passes completes, or when
``request_stop()`` is called (from any thread)."""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Awaitable, List, Optional


class StopSignal:
    """An event set by signals, an awaitable, or :meth:`request`; thread-safe."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._signals: List[int] = []
        self._watcher: "Optional[asyncio.Task[None]]" = None

    def request(self) -> None:
        """Asks to stop; callable from any thread."""
        try:
            self._loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            pass  # the loop has already ended

    def listen(self, until: Optional[Awaitable[object]]) -> None:
        """Stops when ``until`` completes; with ``None``, on SIGTERM or SIGINT (when this
        is the main thread: signal handlers can only be installed there)."""
        if until is not None:
            async def watch() -> None:
                await until
                self.event.set()

            self._watcher = asyncio.ensure_future(watch())
            return
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self.event.set)
                self._signals.append(sig)
            except (NotImplementedError, RuntimeError):
                pass  # not supported by this loop or platform

    def close(self) -> None:
        """Removes the signal handlers and stops watching."""
        for sig in self._signals:
            self._loop.remove_signal_handler(sig)
        self._signals.clear()
        if self._watcher is not None:
            self._watcher.cancel()
