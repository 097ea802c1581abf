"""TLS: an ``amqps://`` consumer verifies the broker against a CA file and presents a
client certificate; an untrusted server or a missing client certificate is an error,
never a plaintext fallback. The broker sits behind a private TLS endpoint (support/tls.py)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, AsyncIterator, List

import pytest

from chime_consumer import Consumer, TaskContext, tls_context
from chime_consumer.connection import connect
from chime_consumer.protocol import ResultMessage, Succeeded
from chime_consumer.testing import TaskBuilder
from support.broker import Vhost
from support.inprocess import ReplyLog, serving
from support.tls import TlsProxy, make_certificates


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[TlsProxy]:
    make_certificates(tmp_path)
    started = TlsProxy(tmp_path)
    await started.start()
    yield started
    await started.stop()


def amqps_url(vhost: Vhost, proxy: TlsProxy) -> str:
    return f"amqps://guest:guest@localhost:{proxy.port}/{vhost.name}"


async def test_a_consumer_runs_tasks_over_tls(vhost: Vhost, proxy: TlsProxy, tmp_path: Path) -> None:
    context = tls_context(ca_file=str(tmp_path / "ca.pem"), cert_file=str(tmp_path / "client.pem"),
                          key_file=str(tmp_path / "client.key"))
    consumer = Consumer(amqps_url(vhost, proxy), "g", instance="tls-1", ssl_context=context)
    outputs: List[Any] = []

    @consumer.handler("j")
    async def handle(ctx: TaskContext) -> str:
        outputs.append(ctx.task_id)
        return "over tls"

    log = ReplyLog(vhost)
    async with serving(consumer):
        task = TaskBuilder("j").group("g").build()
        await vhost.publish("chime.tasks", "g", task.to_json())
        await log.wait_for("the result", lambda r: [x for x in r if isinstance(x, ResultMessage)])
    assert proxy.accepted >= 1 and outputs == [task.task_id]
    (result,) = [x for x in log.replies if isinstance(x, ResultMessage)]
    assert result.outcome == Succeeded("over tls")


async def test_an_untrusted_broker_or_a_missing_client_certificate_fails(
    vhost: Vhost, proxy: TlsProxy, tmp_path: Path
) -> None:
    url = amqps_url(vhost, proxy)
    system_cas = tls_context(cert_file=str(tmp_path / "client.pem"), key_file=str(tmp_path / "client.key"))
    with pytest.raises(Exception) as untrusted:
        await connect(url, system_cas, "untrusted")
    assert "CERTIFICATE_VERIFY_FAILED" in repr(untrusted.value) or isinstance(untrusted.value, ssl.SSLError)
    no_client_cert = tls_context(ca_file=str(tmp_path / "ca.pem"))
    with pytest.raises(Exception):
        connection = await connect(url, no_client_cert, "anonymous")
        await connection.channel()
