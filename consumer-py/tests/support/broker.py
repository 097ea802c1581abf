"""A RabbitMQ virtual host per test (like testkit/src/vhost.rs): made with ``rabbitmqctl``,
deleted afterwards; plus helpers to publish, read and inspect queues on it."""

from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from typing import Any, Dict, List, Optional, Tuple

import aio_pika
import aiormq


def broker_addr() -> str:
    return os.environ.get("CHIME_TEST_AMQP_ADDR", "127.0.0.1:5672")


def rabbitmqctl(*args: str) -> str:
    command = os.environ.get("CHIME_RABBITMQCTL", "rabbitmqctl").split()
    done = subprocess.run(command + list(args), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command + list(args))} failed: {done.stderr.strip()}")
    return done.stdout


class Vhost:
    """A virtual host that exists for one test, with ``guest`` allowed everything."""

    def __init__(self) -> None:
        self.name = f"chime-pytest-{uuid.uuid4().hex}"
        try:
            rabbitmqctl("add_vhost", self.name)
            rabbitmqctl("set_permissions", "-p", self.name, "guest", ".*", ".*", ".*")
        except (OSError, RuntimeError) as error:
            raise RuntimeError(
                f"RabbitMQ is required for this test: {error}. Start it with "
                "deploy/local/rabbitmq.sh; set CHIME_RABBITMQCTL='sudo rabbitmqctl' if needed."
            ) from None

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@{broker_addr()}/{self.name}"

    def delete(self) -> None:
        try:
            rabbitmqctl("delete_vhost", self.name)
        except RuntimeError:
            pass

    def close_connections(self) -> int:
        """Force-closes every client connection to this vhost, as a broker restart would."""
        closed = 0
        for line in rabbitmqctl("list_connections", "-q", "pid", "vhost").splitlines():
            fields = line.split("\t")
            if len(fields) >= 2 and fields[1].strip() == self.name:
                try:
                    rabbitmqctl("close_connection", fields[0].strip(), "chime test: simulated outage")
                    closed += 1
                except RuntimeError:
                    pass
        return closed

    def queues(self) -> Dict[str, Dict[str, str]]:
        """Every queue of the vhost as the broker keeps it: arguments (name -> [AMQP type,
        value], e.g. ``["long", 10]``), durability, flags, consumers, messages."""
        listing = rabbitmqctl(
            "list_queues", "-q", "-p", self.name, "--formatter", "json",
            "name", "arguments", "durable", "auto_delete", "exclusive", "type", "consumers",
            "messages",
        )
        import json

        queues = {q["name"]: q for q in json.loads(listing or "[]")}
        for queue in queues.values():
            if isinstance(queue["arguments"], list):
                queue["arguments"] = {key: [kind, value] for key, kind, value in queue["arguments"]}
        return queues

    async def connect(self) -> aio_pika.abc.AbstractConnection:
        return await aio_pika.connect(self.amqp_url)

    async def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        message_id: Optional[str] = None,
        app_id: Optional[str] = None,
        as_user: Optional["TestUser"] = None,
    ) -> None:
        """Publishes persistently and waits for a clean confirm (routed); as ``guest``
        without ``user_id``, or as ``as_user`` stamped with its ``user_id``."""
        url = self.amqp_url if as_user is None else as_user.amqp_url
        connection = await aio_pika.connect(url)
        try:
            channel = await connection.channel(publisher_confirms=True)
            target = await channel.get_exchange(exchange, ensure=False)
            confirm = await target.publish(
                aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                 message_id=message_id, app_id=app_id,
                                 user_id=None if as_user is None else as_user.name,
                                 content_type="application/json"),
                routing_key,
                mandatory=True,
            )
            assert isinstance(confirm, aiormq.spec.Basic.Ack), f"publish not routed: {confirm!r}"
        finally:
            await connection.close()

    async def drain(self, queue: str) -> List[Tuple[bytes, Dict[str, Any]]]:
        """Takes every message now in ``queue`` (acknowledged): bodies and properties."""
        connection = await self.connect()
        taken = []
        try:
            channel = await connection.channel()
            target = await channel.get_queue(queue, ensure=False)
            while True:
                message = await target.get(no_ack=True, fail=False)
                if message is None:
                    return taken
                taken.append((message.body, {"message_id": message.message_id,
                                             "content_type": message.content_type,
                                             "delivery_mode": int(message.delivery_mode or 0),
                                             "user_id": message.user_id,
                                             "headers": dict(message.headers or {})}))
        finally:
            await connection.close()

    async def consumers(self, queue: str) -> Optional[int]:
        """Consumers of ``queue``; ``None`` while it does not exist."""
        try:
            return (await self.queue_state(queue))[1]
        except aiormq.exceptions.ChannelNotFoundEntity:
            return None

    async def queue_state(self, queue: str) -> Tuple[int, int]:
        """Messages ready in ``queue`` and its consumers (the queue must exist)."""
        connection = await self.connect()
        try:
            channel = await connection.channel()
            declared = await channel.declare_queue(queue, passive=True)
            result = declared.declaration_result
            return result.message_count or 0, result.consumer_count or 0
        finally:
            await connection.close()


class TestUser:
    """A RabbitMQ user that exists for one test (like testkit's ``TestUser``): a unique
    name starting with ``prefix``, a random password, no permissions until
    :meth:`grant`; deleted by :meth:`delete`."""

    __test__ = False  # not a pytest test class

    def __init__(self, prefix: str) -> None:
        self.name = f"{prefix}-{uuid.uuid4().hex}"
        self._password = secrets.token_hex(16)
        self.vhost: Optional[Vhost] = None
        rabbitmqctl("add_user", self.name, self._password)

    def grant(self, vhost: Vhost, configure: str = ".*", write: str = ".*", read: str = ".*") -> None:
        """Allows the user ``configure``, ``write`` and ``read`` (regexes on resource
        names) on ``vhost``, where :attr:`amqp_url` then connects."""
        rabbitmqctl("set_permissions", "-p", vhost.name, self.name, configure, write, read)
        self.vhost = vhost

    @property
    def amqp_url(self) -> str:
        """The URL of the vhost last granted, for this user."""
        vhost = self.vhost.name if self.vhost is not None else "%2f"
        return f"amqp://{self.name}:{self._password}@{broker_addr()}/{vhost}"

    def delete(self) -> None:
        try:
            rabbitmqctl("delete_user", self.name)
        except RuntimeError:
            pass
