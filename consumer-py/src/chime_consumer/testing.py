"""Helpers for testing handlers without a broker: build a task, send it through a JSON
round trip (as it would travel), and run a handler on it, getting the outcome the
consumer would report.

.. code-block:: python

    from chime_consumer.testing import TaskBuilder, run_handler

    outcome = run_handler(greet, TaskBuilder("greet").payload({"name": "ada"}).build())
    assert outcome == Succeeded({"hello": "ada"})
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import datetime
from typing import Any, Optional

from .context import TaskContext
from .handlers import Handler, invoke
from .protocol.messages import PROTOCOL_VERSION, DeliveryMode, TaskMessage, TaskOutcome
from .protocol.run_id import run_id
from .protocol.times import utc_now


class TaskBuilder:
    """Builds a :class:`TaskMessage` with test defaults: app ``default``, group ``test``,
    attempt 1, unsharded, fired now (to the millisecond), payload ``None``."""

    def __init__(self, job: str) -> None:
        now = utc_now()
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)
        job_id = uuid.uuid4()
        self._task = TaskMessage(
            v=PROTOCOL_VERSION,
            task_id=run_id(job_id, now, 0),
            job_id=job_id,
            app="default",
            job=job,
            group="test",
            fire_time=now,
            shard=0,
            shard_total=1,
            attempt=1,
            payload=None,
            published_at=now,
        )

    def _with(self, **changes: Any) -> "TaskBuilder":
        self._task = dataclasses.replace(self._task, **changes)
        return self

    def payload(self, payload: Any) -> "TaskBuilder":
        return self._with(payload=payload)

    def app(self, app: str) -> "TaskBuilder":
        return self._with(app=app)

    def group(self, group: str) -> "TaskBuilder":
        return self._with(group=group)

    def attempt(self, attempt: int) -> "TaskBuilder":
        return self._with(attempt=attempt)

    def mode(self, mode: DeliveryMode, zone: Optional[str] = None) -> "TaskBuilder":
        return self._with(mode=mode, zone=zone)

    def run_timeout_ms(self, ms: Optional[int]) -> "TaskBuilder":
        return self._with(run_timeout_ms=ms)

    def fire_time(self, at: datetime) -> "TaskBuilder":
        """Sets the scheduled fire time and the task id derived from it."""
        return self._with(fire_time=at, task_id=run_id(self._task.job_id, at, self._task.shard))

    def shard(self, shard: int, total: int) -> "TaskBuilder":
        """Sets the shard item and the task id derived from it."""
        return self._with(
            shard=shard,
            shard_total=total,
            task_id=run_id(self._task.job_id, self._task.fire_time, shard),
        )

    def build(self) -> TaskMessage:
        return self._task


async def run_handler_async(
    handler: Handler, task: TaskMessage, instance: str = "test-instance"
) -> TaskOutcome:
    """Runs ``handler`` on ``task`` after a JSON round trip, as the consumer would, and
    returns the outcome it would report."""
    received = TaskMessage.from_json(task.to_json())
    return await invoke(handler, TaskContext(received, instance), "chime-test-handler")


def run_handler(handler: Handler, task: TaskMessage, instance: str = "test-instance") -> TaskOutcome:
    """:func:`run_handler_async` from synchronous code (starts an event loop)."""
    return asyncio.run(run_handler_async(handler, task, instance))
