"""The messages this package writes are valid by the protocol's JSON Schemas in
docs/protocol/ (the Rust side checks the schemas against protocol.md and its own types
in consumer-lib/tests/protocol_schemas.rs)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from chime_consumer.protocol import (
    AckMessage,
    MAX_OUTPUT_BYTES,
    DeliveryMode,
    Failed,
    HeartbeatMessage,
    ObserveMessage,
    PresenceMessage,
    Progress,
    ResultMessage,
    Succeeded,
    TaskError,
    TaskMessage,
    batch_body,
    reply_to_json,
    within_limits,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "protocol"


def schemas() -> Dict[str, Dict[str, Any]]:
    loaded = {}
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        loaded[path.name[: -len(".schema.json")]] = json.loads(path.read_text())
    assert {"task", "ack", "result", "heartbeat", "presence", "observe", "batch"} <= set(loaded)
    return loaded


def validator(name: str) -> Draft202012Validator:
    every = schemas()
    registry: Registry[Any] = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in every.values()
    )
    return Draft202012Validator(every[name], registry=registry)


def check(name: str, body: bytes) -> None:
    instance = json.loads(body)
    errors = [f"{e.message} at {list(e.absolute_path)}" for e in validator(name).iter_errors(instance)]
    assert not errors, (name, instance, errors)
    # Nothing the schema does not declare (the published schemas allow unknown fields).
    declared = set(every_property(name))
    assert set(instance) <= declared, (name, set(instance) - declared)


def every_property(name: str) -> List[str]:
    return list(schemas()[name]["properties"])


NOW = datetime(2026, 11, 21, 10, 0, 5, 987654, tzinfo=timezone.utc)
TASK_ID = uuid.UUID("13bbd270-b3e0-52e4-b681-5cf5d8e0bca0")


def task(**changes: Any) -> TaskMessage:
    fields: Dict[str, Any] = dict(
        task_id=TASK_ID,
        job_id=uuid.UUID("01a1feee-9d19-72f4-80db-4759861094af"),
        app="shop",
        job="close-expired-orders",
        group="orders",
        fire_time=NOW,
        shard=0,
        shard_total=1,
        attempt=1,
        payload={"older_than_min": 30},
        published_at=NOW,
        run_timeout_ms=300000,
    )
    fields.update(changes)
    return TaskMessage(**fields)


def test_tasks_written_here_match_the_schema() -> None:
    for message in [
        task(),
        task(mode=DeliveryMode.ZONE, zone="dc1", run_timeout_ms=None),
        task(mode=DeliveryMode.SHARDED, shard=2, shard_total=4, payload=None),
        task(mode=DeliveryMode.BROADCAST),
    ]:
        check("task", message.to_json())


REPLIES = [
    ("ack", AckMessage(task_id=TASK_ID, attempt=1, consumer="orders-7f9c-12", acked_at=NOW)),
    (
        "result",
        ResultMessage(
            task_id=TASK_ID, attempt=1, consumer="web-1", finished_at=NOW, outcome=Succeeded()
        ),
    ),
    (
        "result",
        ResultMessage(
            task_id=TASK_ID,
            attempt=2,
            consumer="web-1",
            finished_at=NOW,
            outcome=Succeeded(output={"closed": 12}),
            replayed=True,
        ),
    ),
    (
        "result",
        ResultMessage(
            task_id=TASK_ID,
            attempt=2,
            consumer="web-1",
            finished_at=NOW,
            outcome=Failed(TaskError("db down", retryable=True, retry_after_ms=5000)),
        ),
    ),
    (
        "result",
        ResultMessage(
            task_id=TASK_ID,
            attempt=1,
            consumer="web-1",
            finished_at=NOW,
            outcome=within_limits(Succeeded(output="x" * MAX_OUTPUT_BYTES)),
        ),
    ),
    ("heartbeat", HeartbeatMessage(task_id=TASK_ID, attempt=1, consumer="c", at=NOW)),
    (
        "heartbeat",
        HeartbeatMessage(
            task_id=TASK_ID,
            attempt=1,
            consumer="c",
            at=NOW,
            progress=Progress(percent=40.0, note="page 4 of 10"),
        ),
    ),
    (
        "presence",
        PresenceMessage(instance="web-dc1-a", group="web", at=NOW, zone="dc1", broadcast=True),
    ),
    ("presence", PresenceMessage(instance="web-b", group="web", at=NOW)),
    ("observe", ObserveMessage(observer="audit", patterns=("shop.*", "billing.#"), at=NOW)),
]


@pytest.mark.parametrize("kind,reply", REPLIES, ids=[kind for kind, _ in REPLIES])
def test_replies_written_here_match_the_schemas(kind: str, reply: Any) -> None:
    body = reply_to_json(reply)
    check(kind, body)
    assert not list(validator("reply").iter_errors(json.loads(body)))


def test_a_batch_written_here_matches_the_schema() -> None:
    body = batch_body([reply_to_json(reply) for _, reply in REPLIES])
    check("batch", body)


def test_the_schemas_refuse_a_bad_reply() -> None:
    body = json.loads(reply_to_json(REPLIES[0][1]))
    body["consumer"] = "has a space"
    assert list(validator("ack").iter_errors(body))
