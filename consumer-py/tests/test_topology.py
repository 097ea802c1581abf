"""Queue declarations match the Rust library's exactly: the arguments encode as the Rust
side sends them, and against the real broker a Python consumer and the Rust library
declare the same queues in either order without PRECONDITION_FAILED."""

from __future__ import annotations

from typing import Any, Dict, List

from pamqp import encode

from chime_consumer.protocol import topology
from chime_consumer.protocol.field_values import LongLongInt, install
from support.broker import Vhost
from support.processes import ConsumerProcess
from support.waiting import until


def test_work_queue_arguments_are_the_rust_ones() -> None:
    args = topology.work_queue_arguments("chime.group.orders")
    assert args == {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "chime.dlx",
        "x-dead-letter-routing-key": "chime.group.orders.dlq",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": 10,
    }
    assert topology.zone_queue_arguments("web")["x-dead-letter-routing-key"] == "chime.group.web.dlq"
    assert topology.instance_queue_arguments("web") == {
        "x-dead-letter-exchange": "chime.dlx",
        "x-dead-letter-routing-key": "chime.group.web.dlq",
    }
    assert topology.dead_letter_queue_arguments() == {"x-queue-type": "classic"}


def test_the_delivery_limit_travels_as_a_signed_64_bit_integer() -> None:
    install()
    limit = encode.encode_table_value(LongLongInt(10))
    assert limit == b"l" + (10).to_bytes(8, "big", signed=True)
    # Strings are long strings, as lapin sends them; other integers are untouched.
    assert encode.encode_table_value("quorum") == b"S" + (6).to_bytes(4, "big") + b"quorum"
    assert encode.encode_table_value(10) == b"b\x0a"
    table = encode.field_table(topology.work_queue_arguments("q"))
    assert b"x-delivery-limit" + limit in table


def test_names_follow_the_protocol() -> None:
    assert topology.group_queue("orders") == "chime.group.orders"
    assert topology.zone_queue("web", "dc1") == "chime.group.web.zone.dc1"
    assert topology.instance_queue("web", "web-1") == "chime.broadcast.web.web-1"
    assert topology.observer_queue("audit") == "chime.observe.audit"
    assert topology.is_valid_name("close-expired_orders2") and not topology.is_valid_name("-x")
    assert not topology.is_valid_name("a.b") and not topology.is_valid_name("x" * 129)
    assert topology.is_valid_instance("ip-10-0-0-1.ec2.internal:42")
    assert not topology.is_valid_instance("a b") and not topology.is_valid_instance("")
    for ok in ("shop.*", "#", "*.close-orders", "shop.#"):
        assert topology.is_valid_topic_pattern(ok)
    for bad in ("", "shop.", "shop..x", "shop.a b", "shop.**"):
        assert not topology.is_valid_topic_pattern(bad)


DURABLE = ["chime.replies", "chime.replies.dlq", "chime.group.g", "chime.group.g.dlq",
           "chime.group.g.zone.dc1", "chime.observe.audit", "chime.observe.audit.dlq"]
FLAGS = ("arguments", "durable", "auto_delete", "exclusive", "type")


async def declare_all_in_python(connection: Any, instance: str) -> None:
    channel = await connection.channel()
    await topology.declare_replies(connection, channel)
    await topology.declare_group(connection, channel, "g")
    await topology.declare_zone(connection, channel, "g", "dc1")
    await topology.declare_observer(connection, channel, "audit", ["shop.*", "billing.#"])
    await topology.declare_instance_queue(connection, channel, "g", instance)
    # A precondition failure closes the channel; it must still be open.
    assert not channel.is_closed


def start_rust(vhost: Vhost, processes: List[ConsumerProcess]) -> None:
    processes.append(ConsumerProcess.rust(vhost.amqp_url, "g", "r1", "--zone", "dc1", "--broadcast"))
    processes.append(ConsumerProcess.rust(vhost.amqp_url, "g", "audit",
                                          "--observe", "shop.*", "--observe", "billing.#"))


async def rust_consumes(vhost: Vhost, processes: List[ConsumerProcess]) -> None:
    def consuming() -> bool:
        queues = vhost.queues()
        needed = ["chime.group.g", "chime.group.g.zone.dc1", "chime.broadcast.g.r1",
                  "chime.observe.audit"]
        return all(name in queues and queues[name]["consumers"] >= 1 for name in needed)

    await until("the Rust consumer and observer to consume", 30, consuming)
    for process in processes:
        assert "PRECONDITION" not in process.log(), process.log()


def declared(vhost: Vhost, broadcast_instance: str) -> Dict[str, Dict[str, Any]]:
    """The queues as the broker keeps them, the broadcast queue under a common name."""
    queues = vhost.queues()
    queues["broadcast"] = queues.pop(f"chime.broadcast.g.{broadcast_instance}")
    return {name: {flag: queue[flag] for flag in FLAGS} for name, queue in queues.items()}


async def test_python_and_rust_declare_identical_queues(
    vhost: Vhost, processes: List[ConsumerProcess]
) -> None:
    # Rust first; Python declares the same queues on top (same arguments or the broker
    # closes the channel).
    start_rust(vhost, processes)
    await rust_consumes(vhost, processes)
    by_rust = declared(vhost, "r1")
    connection = await vhost.connect()
    await declare_all_in_python(connection, "p0")
    await connection.close()

    # Python first, on a vhost of its own; then the Rust library declares on top.
    other = Vhost()
    try:
        connection = await other.connect()
        await declare_all_in_python(connection, "r1")
        by_python = declared(other, "r1")
        await connection.close()
        start_rust(other, processes)
        await rust_consumes(other, processes)
    finally:
        other.delete()

    assert set(by_rust) == set(by_python) == set(DURABLE) | {"broadcast"}
    for name in DURABLE:
        assert by_python[name]["durable"], name
    # Byte for byte: every argument with its AMQP type (x-delivery-limit is "long").
    assert by_python == by_rust
    assert by_python["chime.group.g"]["arguments"]["x-delivery-limit"] == ["long", 10]
    assert by_python["broadcast"]["exclusive"] and by_python["broadcast"]["auto_delete"]
    # Dead-letter queues are created classic: reading them counts no deliveries.
    for name in ("chime.replies.dlq", "chime.group.g.dlq", "chime.observe.audit.dlq"):
        assert by_python[name]["type"] == "classic", name


async def test_an_existing_quorum_dead_letter_queue_is_used_as_it_is(
    vhost: Vhost, processes: List[ConsumerProcess]
) -> None:
    # As an older version made it: a quorum dead-letter queue.
    connection = await vhost.connect()
    channel = await connection.channel()
    await channel.declare_queue("chime.group.g.dlq", durable=True, arguments={"x-queue-type": "quorum"})
    # Declaring twice is idempotent; neither declaration closes the channel.
    await declare_all_in_python(connection, "p0")
    await declare_all_in_python(connection, "p1")
    await connection.close()
    start_rust(vhost, processes)
    await rust_consumes(vhost, processes)
    queues = vhost.queues()
    assert queues["chime.group.g.dlq"]["type"] == "quorum"
    assert queues["chime.replies.dlq"]["type"] == "classic"
