"""Message encoding and decoding: every JSON example in docs/protocol.md reads and writes
back unchanged, and readers are as strict as the Rust side's."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Dict, List

import pytest

from chime_consumer.protocol import (
    AckMessage,
    DeliveryMode,
    Failed,
    HeartbeatMessage,
    MalformedMessage,
    ObserveMessage,
    PresenceMessage,
    Progress,
    ResultMessage,
    Succeeded,
    TaskError,
    TaskMessage,
    UnsupportedVersion,
    batch_body,
    replies_from_json,
    reply_from_json,
    reply_to_json,
)
from chime_consumer.protocol.times import format_instant, parse_instant

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def doc_examples() -> List[Dict[str, Any]]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.DOTALL)
    return [json.loads(block) for block in blocks]


def by_type(kind: str) -> List[Dict[str, Any]]:
    return [e for e in doc_examples() if e.get("type") == kind]


def test_the_doc_has_an_example_of_every_message() -> None:
    kinds = {e.get("type") for e in doc_examples()}
    assert {None, "ack", "result", "heartbeat", "presence", "observe", "batch"} <= kinds


def test_task_examples_round_trip() -> None:
    tasks = [e for e in doc_examples() if "type" not in e]
    assert len(tasks) >= 2
    for example in tasks:
        task = TaskMessage.from_json(json.dumps(example))
        assert json.loads(task.to_json()) == example
    zoned = TaskMessage.from_dict(tasks[1])
    assert zoned.mode is DeliveryMode.ZONE and zoned.zone == "dc1" and zoned.payload is None
    assert zoned.fire_time == datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    assert zoned.run_timeout_ms == 300000


@pytest.mark.parametrize("kind", ["ack", "result", "heartbeat", "presence", "observe"])
def test_reply_examples_round_trip(kind: str) -> None:
    examples = by_type(kind)
    assert examples
    for example in examples:
        reply = reply_from_json(json.dumps(example))
        assert json.loads(reply_to_json(reply)) == example


def test_batch_example_reads_in_order_and_writes_back() -> None:
    (example,) = by_type("batch")
    replies = replies_from_json(json.dumps(example))
    assert [type(r) for r in replies] == [AckMessage, ResultMessage]
    rebuilt = batch_body([reply_to_json(r) for r in replies])
    assert json.loads(rebuilt) == example


def test_a_dead_letter_is_not_a_task() -> None:
    (dead,) = by_type("dead_letter")
    with pytest.raises(MalformedMessage):
        TaskMessage.from_dict(dead)


def task_dict(**changes: Any) -> Dict[str, Any]:
    base: Dict[str, Any] = {
        "v": 1, "task_id": str(uuid.uuid4()), "job_id": str(uuid.uuid4()), "app": "shop",
        "job": "close", "group": "orders", "fire_time": "2026-11-21T10:00:00Z", "shard": 0,
        "shard_total": 1, "attempt": 1, "payload": {"a": 1},
        "published_at": "2026-11-21T10:00:00.004123456Z",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


def test_optional_fields_default_and_unknown_fields_are_ignored() -> None:
    task = TaskMessage.from_dict(task_dict(extra_field=[1, 2], run_timeout_ms=None, zone=None))
    assert task.mode is DeliveryMode.GROUP
    assert task.zone is None and task.run_timeout_ms is None
    # Nine fraction digits read (microseconds kept), like chrono's output.
    assert task.published_at.microsecond == 4123
    written = json.loads(task.to_json())
    assert "mode" not in written and "zone" not in written and "run_timeout_ms" not in written


@pytest.mark.parametrize(
    "changes",
    [
        {"task_id": "not-a-uuid"},
        {"attempt": -1},
        {"attempt": 2**32},
        {"attempt": 1.0},
        {"attempt": True},
        {"shard": "0"},
        {"app": 7},
        {"fire_time": "2026-11-21 10:00"},
        {"mode": "everywhere"},
        {"payload": ...},
        {"published_at": ...},
        {"zone": 3},
        {"run_timeout_ms": -5},
    ],
)
def test_malformed_tasks_are_refused(changes: Dict[str, Any]) -> None:
    with pytest.raises(MalformedMessage):
        TaskMessage.from_dict(task_dict(**changes))


def test_garbage_and_other_versions_are_refused() -> None:
    for body in (b"not json", b"[1, 2]", b"\xff\xfe", b'{"type":"ack","v":1}'):
        with pytest.raises(MalformedMessage):
            TaskMessage.from_json(body)
    with pytest.raises(UnsupportedVersion) as refused:
        TaskMessage.from_dict(task_dict(v=2))
    assert refused.value.found == 2


def test_batches_are_judged_whole() -> None:
    ack = reply_to_json(AckMessage(uuid.uuid4(), 1, "c", datetime.now(timezone.utc)))
    nested = batch_body([ack, batch_body([ack])])
    with pytest.raises(MalformedMessage):
        replies_from_json(nested)
    old = json.loads(ack)
    old["v"] = 2
    with pytest.raises(UnsupportedVersion):
        replies_from_json(batch_body([ack, json.dumps(old).encode()]))
    with pytest.raises(MalformedMessage):
        replies_from_json(b'{"type": "batch", "v": 1}')


def test_result_wire_shape_is_flat() -> None:
    at = datetime(2026, 11, 21, 10, 0, 1, tzinfo=timezone.utc)
    task_id = uuid.UUID(int=1)
    failed = ResultMessage(task_id, 2, "host-1", at, Failed(TaskError("db down", True, 5000)))
    assert json.loads(reply_to_json(failed)) == {
        "type": "result", "v": 1, "task_id": str(task_id), "attempt": 2,
        "consumer": "host-1", "finished_at": "2026-11-21T10:00:01.000Z", "status": "failed",
        "error": {"message": "db down", "retryable": True, "retry_after_ms": 5000},
    }
    replayed = ResultMessage(task_id, 1, "c", at, Succeeded(None), replayed=True)
    assert json.loads(reply_to_json(replayed)) == {
        "type": "result", "v": 1, "task_id": str(task_id), "attempt": 1, "consumer": "c",
        "finished_at": "2026-11-21T10:00:01.000Z", "replayed": True, "status": "succeeded",
    }


def test_heartbeat_presence_and_observe_shapes() -> None:
    at = datetime(2026, 11, 21, 10, 0, 5, tzinfo=timezone.utc)
    beat = json.loads(reply_to_json(HeartbeatMessage(uuid.UUID(int=7), 1, "c", at, Progress(40, None))))
    assert beat["progress"] == {"percent": 40.0}
    assert isinstance(beat["progress"]["percent"], float)
    bare = json.loads(reply_to_json(HeartbeatMessage(uuid.UUID(int=7), 1, "c", at)))
    assert "progress" not in bare
    presence = json.loads(reply_to_json(PresenceMessage("web-1", "web", at)))
    assert presence == {"type": "presence", "v": 1, "instance": "web-1", "group": "web",
                        "broadcast": False, "at": "2026-11-21T10:00:05.000Z"}
    observe = json.loads(reply_to_json(ObserveMessage("audit", ("shop.*",), at)))
    assert observe["patterns"] == ["shop.*"]


def test_instants_are_written_like_chrono() -> None:
    base = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    assert format_instant(base) == "2026-11-21T10:00:00.000Z"
    assert format_instant(base.replace(microsecond=4000)) == "2026-11-21T10:00:00.004Z"
    assert format_instant(base.replace(microsecond=4999)) == "2026-11-21T10:00:00.004Z"
    shanghai = timezone(timedelta(hours=8))
    assert format_instant(base.astimezone(shanghai)) == "2026-11-21T10:00:00.000Z"
    assert parse_instant("2026-11-21T18:00:00+08:00") == base
    with pytest.raises(ValueError):
        format_instant(datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        parse_instant("2026-11-21")


def test_outputs_over_the_limits_become_permanent_failures() -> None:
    from chime_consumer.protocol import MAX_OUTPUT_BYTES, MAX_OUTPUT_DEPTH, within_limits
    from chime_consumer.protocol.messages import json_depth

    def nested(levels: int) -> Any:
        value: Any = 1
        for _ in range(levels):
            value = [value]
        return value

    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": 2}]}) == 3
    assert json_depth(nested(MAX_OUTPUT_DEPTH)) == MAX_OUTPUT_DEPTH
    ok = Succeeded(nested(MAX_OUTPUT_DEPTH))
    assert within_limits(ok) is ok
    deep = within_limits(Succeeded(nested(126)))
    assert isinstance(deep, Failed) and not deep.error.retryable
    assert "nested 126 levels" in deep.error.message
    big = within_limits(Succeeded("x" * MAX_OUTPUT_BYTES))
    assert isinstance(big, Failed) and "bytes of JSON" in big.error.message
    failed = Failed(TaskError("x", True))
    assert within_limits(failed) is failed

