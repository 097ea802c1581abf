"""AMQP field-table values typed exactly as the Rust side sends them.

RabbitMQ refuses a queue declaration whose arguments differ from the queue's, and the
Rust library declares ``x-delivery-limit`` as a signed 64-bit integer (AMQP type
``l``). ``pamqp``, under ``aio-pika``, picks the smallest integer type that holds a
value (``b`` for 10) and has no way to ask for another. :class:`LongLongInt` marks an
integer to be sent as ``l``; :func:`install` teaches ``pamqp``'s integer encoder that
one type and leaves every other integer to it unchanged.
"""

from __future__ import annotations

import struct
from typing import Callable

_LONG_LONG = struct.Struct(">q")


class LongLongInt(int):
    """An integer sent in a field table as AMQP ``long-long-int`` (type ``l``)."""


def encode_long_long(value: LongLongInt) -> bytes:
    """The field-table encoding of ``value``: ``b"l"`` and 8 big-endian bytes."""
    return b"l" + _LONG_LONG.pack(int(value))


_installed = False


def install() -> None:
    """Makes ``pamqp`` encode :class:`LongLongInt` values as ``l``. Idempotent."""
    global _installed
    if _installed:
        return
    from pamqp import encode

    original: Callable[[int], bytes] = encode.table_integer

    def table_integer(value: int) -> bytes:
        if type(value) is LongLongInt:
            return encode_long_long(value)
        return original(value)

    encode.table_integer = table_integer
    _installed = True
