"""End to end against a real chimed (built from the workspace) on a fresh vhost and
SQLite store: jobs created through its HTTP API, run by Python consumer processes
(tests/adapter.py). Runs succeed, retryable errors retry, permanent errors go dead,
every delivery mode reaches the right instances, observers get copies, a duplicate runs
once, and SIGTERM drains a running handler."""

from __future__ import annotations

import signal
import uuid
from typing import Any, Dict, List, Optional

from chime_consumer.protocol import TaskMessage
from chime_consumer.protocol.times import parse_instant, utc_now
from support.broker import Vhost
from support.processes import Chimed, ConsumerProcess
from support.waiting import until


def job(name: str, target: Dict[str, Any], payload: Any = None, **extra: Any) -> Dict[str, Any]:
    """A paused job (fired only by triggers) with quick retries."""
    body = {"app": "e2e", "name": name, "schedule": {"every": "1h"}, "target": target,
            "payload": payload, "paused": True, "backoff": {"initial": "100ms", "max": "1s"}}
    body.update(extra)
    return body


async def fire(chimed: Chimed, spec: Dict[str, Any]) -> Dict[str, Any]:
    created = await chimed.create_job(spec)
    return await chimed.trigger(created["id"])


async def settled(chimed: Chimed, run_id: str, states: tuple = ("succeeded", "dead")) -> Dict[str, Any]:
    async def check() -> Optional[Dict[str, Any]]:
        run = await chimed.run(run_id)
        return run if run["state"] in states and run.get("fire_state") in (None, *states) else None

    return await until(f"run {run_id} to settle", 40, check)


async def ready(process: ConsumerProcess) -> None:
    await process.wait_for("ready", 20, lambda events: any(e["event"] == "ready" for e in events))


def started(processes: List[ConsumerProcess], task_id: str) -> List[Dict[str, Any]]:
    return [e for p in processes for e in p.of("started") if e["task_id"] == task_id]


async def test_runs_succeed_retry_and_die(
    vhost: Vhost, chimed: Chimed, processes: List[ConsumerProcess]
) -> None:
    worker = ConsumerProcess.python(vhost.amqp_url, "orders", "py-async")
    blocking = ConsumerProcess.python(vhost.amqp_url, "orders", "py-sync", "--sync")
    processes += [worker, blocking]
    await ready(worker)
    await ready(blocking)
    ok = await fire(chimed, job("ok", {"group": "orders"}, {"sleep_ms": 5}))
    retry = await fire(chimed, job("retry", {"group": "orders"}, {"fail_until_attempt": 2}))
    dead = await fire(chimed, job("dead", {"group": "orders"}, {"fail": "permanent"}))
    crash = await fire(chimed, job("bug", {"group": "orders"}, {"panic": True}))

    done = await settled(chimed, ok["id"])
    assert done["state"] == "succeeded" and done["consumer"] in ("py-async", "py-sync")
    assert done["output"] == {"echo": {"sleep_ms": 5}, "instance": done["consumer"]}
    assert done["acked_at"] is not None

    retried = await settled(chimed, retry["id"])
    assert retried["state"] == "succeeded" and retried["attempt"] == 2
    assert retried["history"][0]["event"] == "failed"
    assert retried["history"][0]["error"] == "failing attempt 1 on purpose"

    gone = await settled(chimed, dead["id"])
    assert gone["state"] == "dead" and gone["attempt"] == 1
    assert gone["error"].endswith("asked to fail (permanent)"), gone["error"]
    buggy = await settled(chimed, crash["id"])
    assert buggy["state"] == "dead" and "RuntimeError: asked to panic" in buggy["error"]
    for run in (ok, dead, crash):
        assert len(started(processes, run["id"])) == 1
    # The permanent failure's dead letter reached the group's dead-letter queue.
    async def dead_letters() -> bool:
        return (await vhost.queue_state("chime.group.orders.dlq"))[0] >= 2

    await until("the dead letters", 20, dead_letters)
    threads = {e["thread"] for e in blocking.of("started")} | {e["thread"] for e in worker.of("started")}
    assert any(t.startswith("chime-handler-") for t in threads), threads


async def test_every_delivery_mode_and_observers(
    vhost: Vhost, chimed: Chimed, processes: List[ConsumerProcess]
) -> None:
    dc1 = ConsumerProcess.python(vhost.amqp_url, "web", "web-dc1", "--zone", "dc1", "--broadcast")
    dc2 = ConsumerProcess.python(vhost.amqp_url, "web", "web-dc2", "--zone", "dc2", "--broadcast", "--sync")
    audit = ConsumerProcess.python(vhost.amqp_url, "unused", "audit", "--observe", "e2e.*")
    processes += [dc1, dc2, audit]
    for process in (dc1, dc2):
        await ready(process)
    # The observer has registered once its queue has a consumer.
    async def observing() -> bool:
        return await vhost.consumers("chime.observe.audit") == 1

    await until("the observer to consume", 30, observing)

    # chimed reads registrations every second; copies start once it has read this one.
    async def pattern_read() -> bool:
        return (await chimed.metric("chime_observed_patterns") or 0) >= 1

    await until("chimed to copy for the observer's pattern", 20, pattern_read)
    web = [dc1, dc2]

    sharded = await fire(chimed, job("statements", {"group": "web", "mode": "sharded", "shards": 4}))
    for item in sharded["items"]:
        run = await settled(chimed, item["id"])
        assert run["state"] == "succeeded"
        (start,) = started(web, item["id"])
        assert (start["shard"], start["shard_total"], start["mode"]) == (run["shard"], 4, "sharded")
    assert sorted(i["shard"] for i in sharded["items"]) == [0, 1, 2, 3]

    zoned = await fire(chimed, job("zone-redis", {"group": "web", "mode": "zone", "zones": ["dc1", "dc2"]}))
    for item in zoned["items"]:
        run = await settled(chimed, item["id"])
        (start,) = started(web, item["id"])
        assert start["zone"] == run["zone"] and start["instance"] == f"web-{run['zone']}"

    broadcast = await fire(chimed, job("reload", {"group": "web", "mode": "broadcast"}, ack_timeout="1s"))
    run = await settled(chimed, broadcast["id"])
    assert run["state"] == "succeeded", run
    assert sorted(run["output"]["instances"]) == ["web-dc1", "web-dc2"]
    starts = started(web, broadcast["id"])
    assert sorted(s["instance"] for s in starts) == ["web-dc1", "web-dc2"]
    assert len({s["idempotency_key"] for s in starts}) == 2

    fired = {i["id"] for i in sharded["items"] + zoned["items"]} | {broadcast["id"]}
    await audit.wait_for("a copy of every task", 20,
                         lambda events: fired <= {e["task_id"] for e in events if e["event"] == "observed"})


async def test_a_duplicate_delivery_runs_once(
    vhost: Vhost, chimed: Chimed, processes: List[ConsumerProcess]
) -> None:
    worker = ConsumerProcess.python(vhost.amqp_url, "orders", "py-1")
    processes.append(worker)
    await ready(worker)
    created = await chimed.create_job(job("once", {"group": "orders"}, {"n": 1}))
    first = await chimed.trigger(created["id"])
    run = await settled(chimed, first["id"])
    # RabbitMQ delivers the same task again (as after a lost ack): same id, same attempt.
    again = TaskMessage(
        task_id=uuid.UUID(run["id"]), job_id=uuid.UUID(created["id"]),
        app="e2e", job="once", group="orders", fire_time=parse_instant(run["fire_time"]),
        shard=0, shard_total=1, attempt=run["attempt"], payload={"n": 1}, published_at=utc_now(),
    )
    await vhost.publish("chime.tasks", "orders", again.to_json())
    async def settled_again() -> bool:
        return (await vhost.queue_state("chime.group.orders"))[0] == 0 and len(worker.of("finished")) == 1

    await until("the duplicate to be settled", 20, settled_again)
    assert len(started([worker], run["id"])) == 1
    after = await chimed.run(run["id"])
    assert after["state"] == "succeeded" and after["output"] == run["output"]


async def test_sigterm_drains_the_running_handler(
    vhost: Vhost, chimed: Chimed, processes: List[ConsumerProcess]
) -> None:
    worker = ConsumerProcess.python(vhost.amqp_url, "orders", "py-1")
    processes.append(worker)
    await ready(worker)
    fired = await fire(chimed, job("slow", {"group": "orders"}, {"sleep_ms": 1500}))
    await worker.wait_for("the handler to start", 20, lambda events: worker.of("started"))
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0, worker.log()
    assert len(worker.of("finished")) == 1 and worker.of("stopped")
    run = await settled(chimed, fired["id"])
    assert run["state"] == "succeeded" and run["consumer"] == "py-1"
