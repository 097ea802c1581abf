"""What a handler receives: a :class:`TaskContext` with the task's identity (idempotency
key, job, app, fire time, attempt, shard, zone), its payload, and a way to report
progress.

Extension point (issue 38, cancellation): a cancel signal will reach the handler
through this context (``ctx.cancelled``), set by the delivery that runs it (see
``delivery.py``); nothing here pretends to support it yet.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Any, Callable, Optional, Type, TypeVar

from .errors import PermanentError
from .protocol.messages import DeliveryMode, Progress, TaskMessage
from .protocol.run_id import broadcast_idempotency_key

#: Longest progress note sent; longer notes are cut.
MAX_NOTE_CHARS = 500

T = TypeVar("T")

#: Where progress reports go: the delivery's heartbeat loop. Must be callable from any
#: thread (sync handlers report from theirs).
ProgressSink = Callable[[Progress], None]


class TaskContext:
    """Everything a handler knows about the task it runs."""

    __slots__ = ("_task", "_consumer", "_publisher", "_progress")

    def __init__(
        self,
        task: TaskMessage,
        consumer: str,
        publisher: Optional[str] = None,
        progress: Optional[ProgressSink] = None,
    ) -> None:
        self._task = task
        self._consumer = consumer
        self._publisher = publisher
        self._progress = progress

    def __repr__(self) -> str:
        return (
            f"TaskContext(task_id={self.task_id}, app={self.app!r}, job={self.job!r}, "
            f"attempt={self.attempt}, shard={self.shard}/{self.shard_total})"
        )

    @property
    def task(self) -> TaskMessage:
        """The task message as received."""
        return self._task

    @property
    def task_id(self) -> uuid.UUID:
        """The task id, which is also the run id."""
        return self._task.task_id

    @property
    def idempotency_key(self) -> uuid.UUID:
        """The key to make the handler's side effects happen once: the same for every
        delivery and attempt of this fire (item). For a broadcast task every instance
        runs the fire once, so it is per (task, instance); otherwise the task id."""
        if self._task.mode is DeliveryMode.BROADCAST:
            return broadcast_idempotency_key(self._task.task_id, self._consumer)
        return self._task.task_id

    @property
    def mode(self) -> DeliveryMode:
        """How the job's fires are delivered."""
        return self._task.mode

    @property
    def zone(self) -> Optional[str]:
        """The zone this item is for (``zone`` mode only), else ``None``."""
        return self._task.zone

    @property
    def job_id(self) -> uuid.UUID:
        """The job's id."""
        return self._task.job_id

    @property
    def job(self) -> str:
        """The job's name."""
        return self._task.job

    @property
    def app(self) -> str:
        """The job's app namespace."""
        return self._task.app

    @property
    def group(self) -> str:
        """The consumer group the task was sent to."""
        return self._task.group

    @property
    def fire_time(self) -> datetime:
        """When this fire was scheduled (not when it was delivered), in UTC."""
        return self._task.fire_time

    @property
    def attempt(self) -> int:
        """The scheduler's publish attempt, from 1."""
        return self._task.attempt

    @property
    def shard(self) -> int:
        """The item this task covers, ``0 .. shard_total - 1``: a ``sharded`` handler
        processes only its slice (e.g. rows where ``id % shard_total == shard``). For a
        zone item it is the zone's position among the fire's zones; 0 otherwise."""
        return self._task.shard

    @property
    def shard_total(self) -> int:
        """How many items this fire was split into (1 for unsharded jobs)."""
        return self._task.shard_total

    @property
    def payload(self) -> Any:
        """The job's payload as decoded JSON."""
        return self._task.payload

    @property
    def consumer(self) -> str:
        """This consumer instance's id."""
        return self._consumer

    @property
    def publisher(self) -> Optional[str]:
        """The scheduler node that published this delivery, if it said (diagnostics
        only: a re-publish may come from another node)."""
        return self._publisher

    def payload_as(self, kind: Type[T]) -> T:
        """The payload (a JSON object) as ``kind(**payload)``, e.g. a dataclass. A payload
        of the wrong shape is a :class:`PermanentError`: retrying the same payload
        cannot fix it."""
        payload = self._task.payload
        if not isinstance(payload, dict):
            raise PermanentError(f"payload does not fit {kind.__name__}: not a JSON object")
        try:
            return kind(**payload)
        except (TypeError, ValueError) as error:
            raise PermanentError(f"payload does not fit {kind.__name__}: {error}") from None

    def report_progress(self, percent: Optional[float] = None, note: Optional[str] = None) -> None:
        """Reports progress: ``percent`` done (clamped to 0-100) and/or a short note. It
        goes to the scheduler at once with a heartbeat and shows on the run. Safe to
        call from a sync handler's thread; outside a consumer it does nothing."""
        if percent is not None and not (isinstance(percent, (int, float)) and math.isfinite(percent)):
            percent = None
        progress = Progress(
            percent=None if percent is None else min(100.0, max(0.0, float(percent))),
            note=None if note is None else str(note)[:MAX_NOTE_CHARS],
        )
        if self._progress is not None:
            self._progress(progress)
