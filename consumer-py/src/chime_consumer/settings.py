"""A consumer's options, checked once: every name against the protocol's rules, every
number against its range, so a bad configuration fails at construction with the option
named rather than on the broker."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from typing import Optional

from . import connection
from .errors import INSTANCE_RULE, NAME_RULE, ConfigError
from .protocol import topology

#: Environment variable with the default instance id.
INSTANCE_ENV = "CHIME_INSTANCE"
#: Environment variable with the default zone.
ZONE_ENV = "CHIME_ZONE"
#: Environment variable with the default scheduler user (``scheduler_user``).
SCHEDULER_USER_ENV = "CHIME_SCHEDULER_USER"


def default_instance_id() -> str:
    """``<hostname>-<pid>``: unique among live instances, readable in run history."""
    return f"{socket.gethostname()}-{os.getpid()}"


def check_name(option: str, name: str) -> None:
    """Refuses a group, job, zone or observer name the protocol does not allow."""
    if not isinstance(name, str) or not topology.is_valid_name(name):
        raise ConfigError(option, f"{name!r}: {NAME_RULE}")


def check_count(option: str, value: int, maximum: int) -> None:
    """Refuses a count outside 1..``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ConfigError(option, f"must be an integer between 1 and {maximum}")


def check_seconds(option: str, value: float) -> None:
    """Refuses a duration that is not a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(option, "must be a positive number of seconds")


@dataclass(frozen=True)
class ConsumerSettings:
    """Every option of a :class:`~chime_consumer.Consumer`, with its default."""

    amqp_url: str
    group: str
    instance: str
    zone: Optional[str]
    broadcast: bool
    concurrency: int
    prefetch: int
    drain_timeout: float
    heartbeat_interval: float
    batch_replies: bool
    ssl_context: Optional[ssl.SSLContext]
    scheduler_user: Optional[str] = None

    @classmethod
    def build(
        cls,
        amqp_url: str,
        group: str,
        *,
        instance: Optional[str] = None,
        zone: Optional[str] = None,
        broadcast: bool = False,
        concurrency: int = 8,
        prefetch: Optional[int] = None,
        drain_timeout: float = 30.0,
        heartbeat_interval: float = 10.0,
        batch_replies: bool = True,
        ssl_context: Optional[ssl.SSLContext] = None,
        scheduler_user: Optional[str] = None,
    ) -> "ConsumerSettings":
        connection.check_url(amqp_url, ssl_context)
        check_name("group", group)
        if instance is None:
            instance = os.environ.get(INSTANCE_ENV) or default_instance_id()
        if not isinstance(instance, str) or not topology.is_valid_instance(instance):
            raise ConfigError("instance", f"{instance!r}: {INSTANCE_RULE}")
        if zone is None:
            zone = os.environ.get(ZONE_ENV) or None
        if zone is not None:
            check_name("zone", zone)
        if scheduler_user is None:
            scheduler_user = os.environ.get(SCHEDULER_USER_ENV) or None
        if scheduler_user is not None and (not isinstance(scheduler_user, str) or not scheduler_user):
            raise ConfigError("scheduler_user", "must be a RabbitMQ user name")
        check_count("concurrency", concurrency, 65535)
        if prefetch is None:
            prefetch = min(concurrency * 2, 65535)
        check_count("prefetch", prefetch, 65535)
        check_seconds("drain_timeout", drain_timeout)
        check_seconds("heartbeat_interval", heartbeat_interval)
        for option, queue in (
            ("zone", None if zone is None else topology.zone_queue(group, zone)),
            ("broadcast", topology.instance_queue(group, instance) if broadcast else None),
        ):
            if queue is not None and len(queue.encode()) > topology.MAX_QUEUE_NAME_LEN:
                raise ConfigError(
                    option,
                    f"queue name {queue!r} is longer than {topology.MAX_QUEUE_NAME_LEN} bytes; "
                    "use a shorter group, zone or instance id",
                )
        return cls(
            amqp_url=amqp_url,
            group=group,
            instance=instance,
            zone=zone,
            broadcast=bool(broadcast),
            concurrency=concurrency,
            prefetch=prefetch,
            drain_timeout=float(drain_timeout),
            heartbeat_interval=float(heartbeat_interval),
            batch_replies=bool(batch_replies),
            ssl_context=ssl_context,
            scheduler_user=scheduler_user,
        )
