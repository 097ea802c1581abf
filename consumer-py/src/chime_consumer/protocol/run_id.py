"""The idempotency key: a run's id, derived deterministically from what identifies a
fire (``consumer-lib/src/protocol/run_id.rs``), so every implementation computes the
same UUIDs. ``tests/vectors/run_ids.json`` holds vectors that the Rust library checks
too.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Optional

from .times import unix_millis

#: Namespace of Chime run ids (UUID version 5).
RUN_ID_NAMESPACE = uuid.UUID("6368696d-652d-7275-6e2d-69642d763101")


def run_id(job_id: uuid.UUID, fire_time: datetime, shard: int) -> uuid.UUID:
    """The run id of shard ``shard`` of the scheduled fire of ``job_id`` at ``fire_time``:
    UUIDv5 over ``"{job_id}/{fire_time in unix ms}/{shard}"``."""
    return uuid.uuid5(RUN_ID_NAMESPACE, f"{job_id}/{unix_millis(fire_time)}/{shard}")


def manual_run_id(job_id: uuid.UUID, at: datetime) -> uuid.UUID:
    """The run id of a manual fire (``POST /v1/jobs/{id}/trigger``) at ``at``."""
    return uuid.uuid5(RUN_ID_NAMESPACE, f"{job_id}/manual/{unix_millis(at)}")


def item_run_id(
    job_id: uuid.UUID,
    fire_time: datetime,
    manual: bool,
    shard: int,
    zone: Optional[str],
) -> uuid.UUID:
    """The run id of one item of a fire, for every delivery mode (see
    ``docs/protocol.md``, "The idempotency key")."""
    ms = unix_millis(fire_time)
    if zone is None:
        if not manual:
            return run_id(job_id, fire_time, shard)
        if shard == 0:
            return manual_run_id(job_id, fire_time)
        name = f"{job_id}/manual/{ms}/{shard}"
    elif manual:
        name = f"{job_id}/manual/{ms}/zone/{zone}"
    else:
        name = f"{job_id}/{ms}/zone/{zone}"
    return uuid.uuid5(RUN_ID_NAMESPACE, name)


def broadcast_idempotency_key(task_id: uuid.UUID, instance: str) -> uuid.UUID:
    """The idempotency key of a broadcast task on consumer instance ``instance``: every
    instance runs a broadcast fire once, so the key is per (task, instance)."""
    return uuid.uuid5(task_id, instance)
