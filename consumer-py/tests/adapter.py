"""A consumer process for the tests, built on ``chime_consumer``, with the same command
line and events as the Rust library's ``chime-test-consumer`` (tests/src/bin), so a
scenario can drive either implementation the same way (and the conformance suite can
start this one with given handlers).

It handles every job of its group with one handler whose behaviour the task payload
chooses, and prints one JSON line per handler start and finish on standard output:

- ``{"sleep_ms": N}``: take N ms;
- ``{"fail": "retryable" | "permanent"}``: fail that way;
- ``{"panic": true}``: raise an unexpected exception;
- ``{"crash": true}``: abort the whole process after 300 ms (a poison message);
- ``{"fail_until_attempt": N}``: fail retryably while the attempt is below N;
- ``{"progress": true}``: report 50 % progress, then wait for the heartbeat to carry it;
- ``{"fail_shard": N}``: shard item N fails retryably on attempt 1 only.

``--sync`` registers plain functions (run in threads) instead of ``async def`` ones.
With ``--postgres URL`` job ``effect`` runs in the transactional form on the shared
PostgreSQL store, recording each task id in table ``test_effects`` in the same
transaction, as ``chime-test-consumer`` does. With ``--observe PATTERN`` (repeatable) the
process is an observer named after ``--instance``, printing ``{"event": "observed", ...}``
per copy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from typing import Any, Dict, Optional

from chime_consumer import (
    Consumer,
    JsonFormatter,
    Observer,
    PermanentError,
    RetryableError,
    TaskContext,
    TaskMessage,
)

HEALED = False
_print_lock = threading.Lock()


def emit(line: Dict[str, Any]) -> None:
    with _print_lock:
        print(json.dumps(line), flush=True)


def report(event: str, ctx: TaskContext) -> None:
    emit({
        "event": event,
        "task_id": str(ctx.task_id),
        "job": ctx.job,
        "app": ctx.app,
        "attempt": ctx.attempt,
        "fire_time": ctx.fire_time.isoformat(),
        "instance": ctx.consumer,
        "shard": ctx.shard,
        "shard_total": ctx.shard_total,
        "zone": ctx.zone,
        "mode": ctx.mode.value,
        "payload": ctx.payload,
        "publisher": ctx.publisher,
        "idempotency_key": str(ctx.idempotency_key),
        "at_ms": int(time.time() * 1000),
        "thread": threading.current_thread().name,
    })


def decide(ctx: TaskContext) -> Optional[Dict[str, Any]]:
    """What the payload asks for, after any waiting (done by the caller)."""
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    if payload.get("panic") is True:
        raise RuntimeError("asked to panic")
    if payload.get("crash") is True and not HEALED:
        time.sleep(0.3)
        print("crashing on purpose", file=sys.stderr, flush=True)
        os.abort()
    until = payload.get("fail_until_attempt")
    if isinstance(until, int) and ctx.attempt < until:
        raise RetryableError(f"failing attempt {ctx.attempt} on purpose")
    if payload.get("fail_shard") == ctx.shard and ctx.attempt == 1:
        raise RetryableError(f"failing shard {ctx.shard} on attempt 1 on purpose")
    fail = None if HEALED else payload.get("fail")
    if fail == "retryable":
        raise RetryableError("asked to fail (retryable)")
    if fail == "permanent":
        raise PermanentError("asked to fail (permanent)")
    return {"echo": ctx.payload, "instance": ctx.consumer}


def _sleep_ms(ctx: TaskContext) -> float:
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    ms = payload.get("sleep_ms")
    return ms / 1000 if isinstance(ms, (int, float)) else 0.0


def _wants_progress(ctx: TaskContext) -> bool:
    return isinstance(ctx.payload, dict) and ctx.payload.get("progress") is True


async def handle_async(ctx: TaskContext) -> Any:
    report("started", ctx)
    try:
        await asyncio.sleep(_sleep_ms(ctx))
        if _wants_progress(ctx):
            ctx.report_progress(50.0, "half way")
            await asyncio.sleep(1.5)
        return decide(ctx)
    finally:
        report("finished", ctx)


def handle_sync(ctx: TaskContext) -> Any:
    report("started", ctx)
    try:
        time.sleep(_sleep_ms(ctx))
        if _wants_progress(ctx):
            ctx.report_progress(50.0, "half way")
            time.sleep(1.5)
        return decide(ctx)
    finally:
        report("finished", ctx)


async def effect_async(ctx: TaskContext, conn: Any) -> Any:
    report("started", ctx)
    try:
        await conn.execute(
            "INSERT INTO test_effects (task_id, instance) VALUES (%s, %s)", (ctx.task_id, ctx.consumer)
        )
        await asyncio.sleep(_sleep_ms(ctx))
        return decide(ctx)
    finally:
        report("finished", ctx)


def effect_sync(ctx: TaskContext, conn: Any) -> Any:
    report("started", ctx)
    try:
        conn.execute(
            "INSERT INTO test_effects (task_id, instance) VALUES (%s, %s)", (ctx.task_id, ctx.consumer)
        )
        time.sleep(_sleep_ms(ctx))
        return decide(ctx)
    finally:
        report("finished", ctx)


async def prepare_effects(url: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        async with conn.transaction():
            # Instances start together: serialise the CREATE TABLE like the store does.
            await conn.execute("SELECT pg_advisory_xact_lock(42)")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS test_effects (task_id uuid NOT NULL, instance text NOT NULL)"
            )


async def main(args: argparse.Namespace) -> None:
    if args.observe:
        observer = Observer(args.amqp_url, args.instance, args.observe, concurrency=args.concurrency)

        @observer.handler
        async def observed(task: TaskMessage) -> None:
            emit({"event": "observed", "task_id": str(task.task_id), "job": task.job,
                  "app": task.app, "attempt": task.attempt, "shard": task.shard,
                  "instance": args.instance})

        await observer.serve()
        return
    consumer = Consumer(
        args.amqp_url,
        args.group,
        instance=args.instance,
        zone=args.zone,
        broadcast=args.broadcast,
        concurrency=args.concurrency,
        batch_replies=not args.no_batch,
        drain_timeout=args.drain_timeout,
    )
    consumer.fallback_handler(handle_sync if args.sync else handle_async)
    if args.postgres:
        from chime_consumer.idempotency import PostgresIdempotencyStore

        await prepare_effects(args.postgres)
        store = PostgresIdempotencyStore(args.postgres)
        consumer.transactional_handler("effect", store)(effect_sync if args.sync else effect_async)
    emit({"event": "ready", "instance": args.instance})
    await consumer.serve()
    emit({"event": "stopped", "instance": args.instance})


def parse(argv: Optional[list] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--postgres")
    parser.add_argument("--heal", action="store_true")
    parser.add_argument("--zone")
    parser.add_argument("--broadcast", action="store_true")
    parser.add_argument("--observe", action="append", default=[])
    parser.add_argument("--sync", action="store_true")
    parser.add_argument("--no-batch", action="store_true")
    parser.add_argument("--drain-timeout", type=float, default=30.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    HEALED = arguments.heal
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    asyncio.run(main(arguments))
