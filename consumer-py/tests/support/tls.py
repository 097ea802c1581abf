"""A private TLS endpoint in front of the real RabbitMQ for one test: a throwaway CA, a
server certificate for ``localhost`` and a client certificate (made with ``openssl``),
and a proxy that terminates TLS, requires a client certificate signed by the CA, and
forwards the bytes to the broker."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path
from typing import List, Optional, Tuple

from .broker import broker_addr


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> None:
    """``ca.pem``, ``server.pem``/``server.key`` (localhost) and ``client.pem``/``client.key``."""
    d = str(directory)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=chime test CA",
             "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    for name, extension in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                            ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr")
        (directory / f"{name}.ext").write_text(extension + "\n")
        _openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", f"{d}/{name}.ext", "-out", f"{d}/{name}.pem")


class TlsProxy:
    """Listens with TLS on a free port of 127.0.0.1 and pipes each connection to RabbitMQ."""

    def __init__(self, directory: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(directory / "ca.pem"))
        self.context.load_cert_chain(str(directory / "server.pem"), str(directory / "server.key"))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.server: Optional[asyncio.AbstractServer] = None
        self.port = 0
        self.accepted = 0
        self._pipes: List["asyncio.Task[None]"] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = broker_addr().rsplit(":", 1)
        upstream: Tuple[asyncio.StreamReader, asyncio.StreamWriter] = await asyncio.open_connection(host, int(port))
        self._pipes += [asyncio.ensure_future(_pipe(reader, upstream[1])),
                        asyncio.ensure_future(_pipe(upstream[0], writer))]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()
