"""Connecting to RabbitMQ: plain ``amqp://`` or TLS ``amqps://`` (with an
``ssl.SSLContext`` that carries the CA bundle and an optional client certificate), and
watching a connection and its channels for loss.

Safe by default: an ``ssl_context`` with an ``amqp://`` URL is refused rather than
silently ignored (there is never a plaintext fallback), and only the broker's host,
port and vhost ever reach a log line, never the URL's password.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Optional, Sequence

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection
from yarl import URL

from .errors import ConfigError

#: How long connecting may take before the attempt counts as failed.
CONNECT_TIMEOUT = 10.0


def check_url(amqp_url: str, ssl_context: Optional[ssl.SSLContext]) -> None:
    """Refuses a URL that is not AMQP, and TLS settings with a plaintext URL."""
    try:
        scheme = URL(amqp_url).scheme
    except (TypeError, ValueError):
        raise ConfigError("amqp_url", "not a URL") from None
    if scheme not in ("amqp", "amqps"):
        raise ConfigError("amqp_url", "use an amqp:// or amqps:// URL")
    if ssl_context is not None and scheme != "amqps":
        raise ConfigError(
            "ssl_context", "TLS settings need an amqps:// URL (no plaintext fallback)"
        )


def describe(amqp_url: str) -> str:
    """``host:port/vhost`` of a broker URL, for logs: never its credentials."""
    url = URL(amqp_url)
    port = url.port or (5671 if url.scheme == "amqps" else 5672)
    return f"{url.scheme}://{url.host}:{port}{url.path or '/'}"


def tls_context(
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
    key_password: Optional[str] = None,
) -> ssl.SSLContext:
    """A client TLS context that verifies the broker's certificate and host name against
    ``ca_file`` (default: the system's CAs) and presents ``cert_file``/``key_file`` as
    the client certificate when given."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file, password=key_password)
    elif key_file is not None:
        raise ConfigError("key_file", "a client key needs its certificate (cert_file)")
    return context


async def connect(
    amqp_url: str, ssl_context: Optional[ssl.SSLContext], name: str
) -> AbstractConnection:
    """Opens a connection named ``name`` (shown in RabbitMQ's management tools)."""
    kwargs: Any = {}
    if ssl_context is not None:
        kwargs["ssl_context"] = ssl_context
    connection: AbstractConnection = await aio_pika.connect(
        amqp_url,
        timeout=CONNECT_TIMEOUT,
        client_properties={"connection_name": name},
        **kwargs,
    )
    return connection


def watch(lost: asyncio.Event, *closables: Any) -> None:
    """Sets ``lost`` when the connection or any of the channels closes."""
    for closable in closables:
        closable.close_callbacks.add(lambda *_: lost.set())


async def watch_consumer_cancel(
    channel: AbstractChannel, tags: Sequence[str], lost: asyncio.Event
) -> "asyncio.Task[None]":
    """Sets ``lost`` when the broker cancels one of the consumers ``tags`` of ``channel``
    (its queue was deleted), so the session is rebuilt and the queue declared again.
    aiormq 7 reports the cancel; older versions only forget the consumer, which a check
    every second notices. Returns the watching task (cancel it with the session)."""
    underlay: Any = await channel.get_underlay_channel()
    callbacks = getattr(underlay, "on_consumer_cancel_callbacks", None)
    if callbacks is not None:
        callbacks.add(lambda *_: lost.set())

    async def check() -> None:
        while not lost.is_set():
            await asyncio.sleep(1.0)
            if any(tag not in underlay.consumers for tag in tags):
                lost.set()

    return asyncio.ensure_future(check())


async def close_quietly(*closables: "AbstractChannel | AbstractConnection") -> None:
    """Closes channels and a connection, ignoring that they may already be gone."""
    for closable in closables:
        try:
            await asyncio.wait_for(closable.close(), CONNECT_TIMEOUT)
        except Exception:  # noqa: BLE001 - already closed or unreachable
            pass


async def stopped_or_lost(stop: asyncio.Event, lost: asyncio.Event) -> bool:
    """Waits until shutdown is asked (``True``) or the session is lost (``False``)."""
    stopped = asyncio.ensure_future(stop.wait())
    gone = asyncio.ensure_future(lost.wait())
    await asyncio.wait({stopped, gone}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    gone.cancel()
    return stop.is_set()


async def pause_unless_stopped(stop: asyncio.Event, delay: float) -> None:
    """Sleeps ``delay`` seconds, or less when shutdown is asked meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), delay)
    except asyncio.TimeoutError:
        pass
