"""Presence: while a session is open the instance announces itself on the reply exchange
every :data:`~chime_consumer.protocol.PRESENCE_INTERVAL_MS` (its group, zone and whether
it takes broadcasts), the first as soon as the session opens, so the scheduler knows
which zones and instances are live. An unconfirmed presence is only logged and counted
(``chime_consumer_presence_total{outcome="sent"|"failed"}``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from .protocol.messages import PRESENCE_INTERVAL_MS
from .replies import ReplyError, ReplyPublisher
from .stats import Counters

log = logging.getLogger("chime_consumer")

INTERVAL = PRESENCE_INTERVAL_MS / 1000


async def announce_forever(
    replies: ReplyPublisher, group: str, zone: Optional[str], broadcast: bool, stats: Counters
) -> None:
    """Sends presence now and every :data:`INTERVAL` until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            # Never let a slow confirm hold up the next announcement.
            await asyncio.wait_for(replies.send_presence(group, zone, broadcast), INTERVAL)
            outcome = "sent"
        except (ReplyError, asyncio.TimeoutError) as error:
            log.debug("presence not confirmed", extra={"group": group, "error": str(error)})
            outcome = "failed"
        stats.increment("chime_consumer_presence_total", outcome=outcome)
        await asyncio.sleep(max(0.0, INTERVAL - (loop.time() - started)))
