"""Running a consumer or observer inside the test's event loop."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List

from chime_consumer import Consumer
from chime_consumer.protocol import Reply, replies_from_json

from .broker import Vhost
from .waiting import until


@asynccontextmanager
async def serving(consumer: Consumer) -> AsyncIterator[Consumer]:
    """Serves ``consumer`` for the block (once it consumes), then stops it and waits."""
    stop = asyncio.Event()
    served = asyncio.ensure_future(consumer.serve(until=stop.wait()))

    async def consuming() -> bool:
        if served.done():
            served.result()  # raises what ended it
            raise AssertionError("the consumer stopped")
        return consumer.consuming is not None and consumer.consuming.is_set()

    await until("the consumer to consume", 20, consuming)
    try:
        yield consumer
    finally:
        stop.set()
        await asyncio.wait_for(served, 60)


class ReplyLog:
    """Collects what consumers sent to the reply queue (read with basic.get)."""

    def __init__(self, vhost: Vhost) -> None:
        self.vhost = vhost
        self.replies: List[Reply] = []
        self.messages: List[Dict[str, Any]] = []

    async def fetch(self) -> List[Reply]:
        for body, properties in await self.vhost.drain("chime.replies"):
            self.messages.append({"body": body, **properties})
            self.replies.extend(replies_from_json(body))
        return self.replies

    async def wait_for(self, what: str, check: Any, timeout: float = 20) -> Any:
        async def probe() -> Any:
            return check(await self.fetch()) or None

        return await until(what, timeout, probe)
