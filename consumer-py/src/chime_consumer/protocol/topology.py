"""RabbitMQ topology: every exchange and queue name Chime uses, the arguments each queue
is declared with, and the functions that declare them. Mirrors
``consumer-lib/src/protocol/topology/`` exactly: RabbitMQ closes the channel with
``PRECONDITION_FAILED`` when two declarations of a queue differ, so a Python consumer
and the Rust library must declare the same queues with the same arguments (the broker
tests declare both ways round).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue

from . import field_values
from .field_values import LongLongInt

#: Direct exchange the scheduler publishes tasks to; the routing key is the group.
TASK_EXCHANGE = "chime.tasks"
#: Direct exchange broadcast tasks are published to; the routing key is the group.
BROADCAST_EXCHANGE = "chime.broadcast"
#: Topic exchange that receives observer copies under ``<app>.<job>``.
TOPIC_EXCHANGE = "chime.topics"
#: Direct exchange consumers publish replies to.
REPLY_EXCHANGE = "chime.replies"
#: Routing key of every reply.
REPLY_ROUTING_KEY = "reply"
#: Queue the scheduler's result collector consumes.
REPLY_QUEUE = "chime.replies"
#: Direct exchange that receives dead-lettered messages.
DEAD_LETTER_EXCHANGE = "chime.dlx"
#: How many times RabbitMQ delivers a message from a work queue before dead-lettering it.
DELIVERY_LIMIT = 10
#: Longest group, app, job, zone, observer name or instance id accepted.
MAX_NAME_LEN = 128
#: Longest queue name RabbitMQ accepts (an AMQP short string).
MAX_QUEUE_NAME_LEN = 255

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def group_queue(group: str) -> str:
    """The durable work queue of consumer group ``group``."""
    return f"chime.group.{group}"


def zone_queue(group: str, zone: str) -> str:
    """The durable work queue of zone ``zone`` of group ``group``."""
    return f"chime.group.{group}.zone.{zone}"


def zone_routing_key(group: str, zone: str) -> str:
    """The routing key, on :data:`TASK_EXCHANGE`, of the tasks of a group's zone."""
    return f"{group}.{zone}"


def instance_queue(group: str, instance: str) -> str:
    """The broadcast queue of consumer instance ``instance`` of group ``group``."""
    return f"chime.broadcast.{group}.{instance}"


def observer_queue(name: str) -> str:
    """The durable queue of observer ``name``."""
    return f"chime.observe.{name}"


def topic_routing_key(app: str, job: str) -> str:
    """The routing key of a task's copy on :data:`TOPIC_EXCHANGE`: ``<app>.<job>``."""
    return f"{app}.{job}"


def dead_letter_queue(queue: str) -> str:
    """The dead-letter queue paired with ``queue``; also the routing key of its dead
    letters."""
    return f"{queue}.dlq"


def is_valid_name(name: str) -> bool:
    """Whether ``name`` may be a group, app, job, zone or observer name: 1 to 128 ASCII
    letters, digits, ``-`` or ``_``, starting with a letter or digit."""
    return 0 < len(name) <= MAX_NAME_LEN and _NAME.match(name) is not None


def is_valid_instance(instance: str) -> bool:
    """Whether ``instance`` may be a consumer instance id: 1 to 128 printable ASCII
    characters without spaces."""
    return 0 < len(instance) <= MAX_NAME_LEN and all(0x21 <= ord(c) <= 0x7E for c in instance)


def is_valid_topic_pattern(pattern: str) -> bool:
    """Whether ``pattern`` is a topic pattern over ``<app>.<job>``: dot-separated words,
    each a name, ``*`` (one word) or ``#`` (any number of words)."""
    return (
        0 < len(pattern) <= 2 * MAX_NAME_LEN + 1
        and all(word in ("*", "#") or is_valid_name(word) for word in pattern.split("."))
    )


def work_queue_arguments(queue: str) -> Dict[str, Any]:
    """Arguments of a work queue (a group's, an observer's, the reply queue): a quorum
    queue dead-lettering at least once to its own dead-letter queue."""
    return _quorum_arguments(dead_letter_queue(queue))


def zone_queue_arguments(group: str) -> Dict[str, Any]:
    """Arguments of a zone's work queue: like the group's, dead-lettering into the
    group's dead-letter queue."""
    return _quorum_arguments(dead_letter_queue(group_queue(group)))


def instance_queue_arguments(group: str) -> Dict[str, Any]:
    """Arguments of an instance's broadcast queue: a classic queue (exclusive queues
    cannot be quorum queues) dead-lettering into the group's dead-letter queue."""
    return {
        "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
        "x-dead-letter-routing-key": dead_letter_queue(group_queue(group)),
    }


def dead_letter_queue_arguments() -> Dict[str, Any]:
    """Arguments a missing dead-letter queue is created with: a classic queue with nothing
    downstream. Reading dead letters gets and requeues the head message, which a quorum
    queue counts as a delivery (RabbitMQ 4.x drops a message past its default delivery
    limit of 20); a classic queue counts none. An existing dead-letter queue is used as it
    is (see :func:`declare_dead_letter_queue`)."""
    return {"x-queue-type": "classic"}


def _quorum_arguments(dead_letter_routing_key: str) -> Dict[str, Any]:
    # Same keys, values and AMQP types as the Rust library: strings as long strings,
    # the delivery limit as a signed 64-bit integer.
    return {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
        "x-dead-letter-routing-key": dead_letter_routing_key,
        # At-least-once dead-lettering only takes effect with reject-publish overflow.
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": LongLongInt(DELIVERY_LIMIT),
    }


_EXCHANGES = (
    (TASK_EXCHANGE, aio_pika.ExchangeType.DIRECT),
    (REPLY_EXCHANGE, aio_pika.ExchangeType.DIRECT),
    (DEAD_LETTER_EXCHANGE, aio_pika.ExchangeType.DIRECT),
    (BROADCAST_EXCHANGE, aio_pika.ExchangeType.DIRECT),
    (TOPIC_EXCHANGE, aio_pika.ExchangeType.TOPIC),
)


async def declare_exchanges(channel: AbstractChannel) -> None:
    """Declares the exchanges every participant needs (durable). Idempotent."""
    field_values.install()
    for name, kind in _EXCHANGES:
        await channel.declare_exchange(name, kind, durable=True)


async def declare_dead_letter_queue(
    connection: AbstractConnection, channel: AbstractChannel, dlq: str
) -> None:
    """Declares dead-letter queue ``dlq`` bound to :data:`DEAD_LETTER_EXCHANGE` by its own
    name. One that exists is used as it is, whatever its type (a quorum dead-letter queue
    made by an older version keeps working); a missing one is created as a durable
    classic queue. The existence check is a passive declare on a throwaway channel of
    ``connection`` (a missing queue closes that channel only), as in the Rust library.
    Idempotent."""
    if not await _queue_exists(connection, dlq):
        await channel.declare_queue(dlq, durable=True, arguments=dead_letter_queue_arguments())
    queue = await channel.get_queue(dlq, ensure=False)
    await queue.bind(DEAD_LETTER_EXCHANGE, routing_key=dlq)


async def _queue_exists(connection: AbstractConnection, queue: str) -> bool:
    probe = await connection.channel(publisher_confirms=False)
    try:
        await probe.declare_queue(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    finally:
        if not probe.is_closed:
            await probe.close()
    return True


async def _declare_work_queue(
    connection: AbstractConnection,
    channel: AbstractChannel,
    queue: str,
    exchange: str,
    routing_key: str,
) -> AbstractQueue:
    await declare_dead_letter_queue(connection, channel, dead_letter_queue(queue))
    declared = await channel.declare_queue(
        queue, durable=True, arguments=work_queue_arguments(queue)
    )
    await declared.bind(exchange, routing_key=routing_key)
    return declared


async def declare_group(connection: AbstractConnection, channel: AbstractChannel, group: str) -> None:
    """Declares group ``group``'s work queue bound to :data:`TASK_EXCHANGE`, its
    dead-letter queue, and the exchanges. Idempotent."""
    await declare_exchanges(channel)
    await _declare_work_queue(connection, channel, group_queue(group), TASK_EXCHANGE, group)


async def declare_zone(
    connection: AbstractConnection, channel: AbstractChannel, group: str, zone: str
) -> None:
    """Declares zone ``zone``'s work queue of group ``group`` and the group's dead-letter
    queue it dead-letters into, and the exchanges. Idempotent."""
    await declare_exchanges(channel)
    await declare_dead_letter_queue(connection, channel, dead_letter_queue(group_queue(group)))
    queue = await channel.declare_queue(
        zone_queue(group, zone), durable=True, arguments=zone_queue_arguments(group)
    )
    await queue.bind(TASK_EXCHANGE, routing_key=zone_routing_key(group, zone))


async def declare_instance_queue(
    connection: AbstractConnection, channel: AbstractChannel, group: str, instance: str
) -> str:
    """Declares instance ``instance``'s broadcast queue of ``group``: exclusive to this
    connection, auto-deleted with it, bound to :data:`BROADCAST_EXCHANGE` with the
    group. Declares the exchanges and the group's dead-letter queue too. Returns the
    queue's name."""
    await declare_exchanges(channel)
    await declare_dead_letter_queue(connection, channel, dead_letter_queue(group_queue(group)))
    name = instance_queue(group, instance)
    queue = await channel.declare_queue(
        name,
        durable=False,
        exclusive=True,
        auto_delete=True,
        arguments=instance_queue_arguments(group),
    )
    await queue.bind(BROADCAST_EXCHANGE, routing_key=group)
    return name


async def declare_observer(
    connection: AbstractConnection, channel: AbstractChannel, name: str, patterns: Sequence[str]
) -> str:
    """Declares observer ``name``'s durable queue (with its own dead-letter queue) bound
    to :data:`TOPIC_EXCHANGE` with each of ``patterns``. Returns the queue's name."""
    await declare_exchanges(channel)
    queue_name = observer_queue(name)
    if not patterns:
        return queue_name
    first, *rest = patterns
    queue = await _declare_work_queue(connection, channel, queue_name, TOPIC_EXCHANGE, first)
    for pattern in rest:
        await queue.bind(TOPIC_EXCHANGE, routing_key=pattern)
    return queue_name


async def declare_replies(connection: AbstractConnection, channel: AbstractChannel) -> None:
    """Declares the reply queue bound to :data:`REPLY_EXCHANGE`, its dead-letter queue
    and the exchanges. Idempotent."""
    await declare_exchanges(channel)
    await _declare_work_queue(connection, channel, REPLY_QUEUE, REPLY_EXCHANGE, REPLY_ROUTING_KEY)


def consumer_queues(group: str, instance: str, zone: Optional[str], broadcast: bool) -> List[str]:
    """The queues a consumer instance consumes, in declaration order."""
    queues = [group_queue(group)]
    if zone is not None:
        queues.append(zone_queue(group, zone))
    if broadcast:
        queues.append(instance_queue(group, instance))
    return queues
