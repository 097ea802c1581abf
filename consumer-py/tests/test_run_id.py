"""Run ids and broadcast keys: the same UUIDs as the Rust library, checked against the
vectors consumer-lib/tests/run_id_vectors.rs keeps in tests/vectors/run_ids.json."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

from chime_consumer.protocol import RUN_ID_NAMESPACE, broadcast_idempotency_key, item_run_id, run_id
from chime_consumer.protocol.times import parse_instant, unix_millis

VECTORS = json.loads((Path(__file__).parent / "vectors" / "run_ids.json").read_text())


def test_every_vector_derives_the_same_id() -> None:
    assert uuid.UUID(VECTORS["namespace"]) == RUN_ID_NAMESPACE
    assert len(VECTORS["run_ids"]) >= 100
    for vector in VECTORS["run_ids"]:
        at = parse_instant(vector["fire_time"])
        assert unix_millis(at) == vector["fire_ms"], vector
        derived = item_run_id(
            uuid.UUID(vector["job_id"]), at, vector["manual"], vector["shard"], vector["zone"]
        )
        assert str(derived) == vector["id"], vector


def test_every_broadcast_key_matches() -> None:
    assert VECTORS["broadcast_keys"]
    for vector in VECTORS["broadcast_keys"]:
        key = broadcast_idempotency_key(uuid.UUID(vector["task_id"]), vector["instance"])
        assert str(key) == vector["key"], vector


def test_the_documented_examples() -> None:
    at = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    nil = uuid.UUID(int=0)
    assert str(run_id(nil, at, 0)) == "13bbd270-b3e0-52e4-b681-5cf5d8e0bca0"
    assert str(run_id(nil, at, 3)) == "107858a2-8988-5431-8639-7b21ef4055ca"
    assert str(item_run_id(nil, at, False, 0, "dc1")) == "13208a6f-ef06-5cc4-b749-364431668152"
    assert str(item_run_id(nil, at, True, 0, None)) == "c47b7491-456d-5465-8728-cb4366de2b94"
    assert str(item_run_id(nil, at, True, 2, None)) == "d150363c-d020-5eae-a157-f4a0bcd2e983"
    assert str(item_run_id(nil, at, True, 0, "dc1")) == "da26900f-7605-5502-8bb1-b6509ecca115"
    task = uuid.UUID("13bbd270-b3e0-52e4-b681-5cf5d8e0bca0")
    assert str(broadcast_idempotency_key(task, "web-1")) == "47bd7b20-c2f1-569a-9426-bf932cc2c51f"


def test_sub_millisecond_parts_do_not_change_the_id() -> None:
    job = uuid.uuid4()
    at = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    assert run_id(job, at, 0) == run_id(job, at.replace(microsecond=999), 0)
    assert run_id(job, at, 0) != run_id(job, at.replace(microsecond=1000), 0)
