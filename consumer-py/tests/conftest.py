"""Fixtures: a fresh RabbitMQ vhost per test, a chimed on it, consumer processes that are
always stopped, and a PostgreSQL database per test."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
import sys
import uuid
from pathlib import Path
from typing import AsyncIterator, Callable, Iterator, List

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.broker import TestUser, Vhost  # noqa: E402
from support.processes import Chimed, ConsumerProcess  # noqa: E402


@pytest.fixture(scope="session")
def cleanup() -> Iterator[ThreadPoolExecutor]:
    """Deletes vhosts in the background (rabbitmqctl takes a second or two each); the
    session waits for every deletion before it ends."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="vhost-cleanup") as pool:
        yield pool


@pytest.fixture
def vhost(cleanup: ThreadPoolExecutor) -> Iterator[Vhost]:
    made = Vhost()
    yield made
    cleanup.submit(made.delete)


@pytest.fixture
def users() -> Iterator[Callable[[str], TestUser]]:
    """Makes RabbitMQ users (``users(prefix)``) that are deleted after the test."""
    made: List[TestUser] = []

    def make(prefix: str) -> TestUser:
        made.append(TestUser(prefix))
        return made[-1]

    yield make
    for user in made:
        user.delete()


@pytest.fixture
async def chimed(vhost: Vhost) -> AsyncIterator[Chimed]:
    # Fast reconciliation so retries and timeouts show within a test's patience.
    started = Chimed(vhost.amqp_url, env={"CHIME_RECONCILE_INTERVAL": "200ms"})
    try:
        await started.ready()
        yield started
    finally:
        started.stop()


@pytest.fixture
def processes() -> Iterator[List[ConsumerProcess]]:
    """Append every started consumer process here; they are killed after the test."""
    started: List[ConsumerProcess] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A database of its own on ``CHIME_TEST_POSTGRES_URL``, dropped afterwards."""
    import psycopg

    server = os.environ.get(
        "CHIME_TEST_POSTGRES_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )
    name = f"chime_pytest_{uuid.uuid4().hex}"
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as error:
        raise RuntimeError(
            f"PostgreSQL is required for this test ({error}): start it with "
            "deploy/local/postgres.sh, or set CHIME_TEST_POSTGRES_URL"
        ) from None
    base, _, _ = server.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

