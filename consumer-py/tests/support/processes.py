"""Real processes under test: ``chimed`` (built from the workspace) with its HTTP API,
and consumer processes (the Python adapter, or the Rust ``chime-test-consumer``) whose
JSON event lines are collected as they print them."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .waiting import until

PKG = Path(__file__).resolve().parents[2]
ROOT = PKG.parent
ADAPTER = PKG / "tests" / "adapter.py"


def binary(name: str) -> Path:
    """A workspace binary (``chimed``, ``chime-test-consumer``); scripts/test.sh builds
    them, or ``cargo build -p chime-scheduler --bin chimed -p chime-tests --bin
    chime-test-consumer``."""
    path = Path(os.environ.get("CHIME_BIN_DIR", ROOT / "target" / "debug")) / name
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: build it with `cargo build -p chime-scheduler --bin chimed "
            "-p chime-tests --bin chime-test-consumer` (consumer-py/scripts/test.sh does)"
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Chimed:
    """A real chimed on a free port with a temporary SQLite store and a test vhost."""

    def __init__(self, amqp_url: str, env: Optional[Dict[str, str]] = None) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="chime-pytest-")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(self.dir.name) / "chimed.log"
        # The bootstrap admin token chimed reads from its admin_token_file.
        self.token = "chime_pytest_" + secrets.token_hex(32)
        token_file = Path(self.dir.name) / "admin.token"
        token_file.touch(mode=0o600)
        token_file.write_text(self.token)
        environment = dict(os.environ)
        environment.update({
            "CHIME_DATABASE_URL": f"sqlite://{self.dir.name}/chime.db",
            "CHIME_AMQP_URL": amqp_url,
            "CHIME_HTTP_ADDR": f"127.0.0.1:{self.port}",
            "CHIME_LOG": "info",
            "CHIME_ADMIN_TOKEN_FILE": str(token_file),
        })
        environment.update(env or {})
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [str(binary("chimed"))], env=environment, stdout=self._log, stderr=subprocess.STDOUT
        )

    async def ready(self) -> None:
        async def check() -> Optional[bool]:
            if self.process.poll() is not None:
                raise AssertionError(f"chimed exited: {self.log()}")
            try:
                status, _ = await self.call("GET", "/readyz")
            except OSError:
                return None
            return status == 200 or None

        await until(f"chimed on port {self.port} to be ready ({self.log_path})", 30, check)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def call(self, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        def send() -> Tuple[int, Any]:
            data = None if body is None else json.dumps(body).encode()
            request = urllib.request.Request(self.base + path, data=data, method=method,
                                             headers={"content-type": "application/json",
                                                      "authorization": f"Bearer {self.token}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    raw = response.read()
                    return response.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as error:
                raw = error.read()
                return error.code, json.loads(raw) if raw else None

        return await asyncio.get_running_loop().run_in_executor(None, send)

    async def metric(self, name: str) -> Optional[float]:
        """The value of the sample ``name`` (with its labels, if any) on ``/metrics``."""
        def scrape() -> str:
            request = urllib.request.Request(self.base + "/metrics",
                                             headers={"authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.read().decode()  # type: ignore[no-any-return]

        text = await asyncio.get_running_loop().run_in_executor(None, scrape)
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    async def create_job(self, job: Dict[str, Any]) -> Dict[str, Any]:
        status, body = await self.call("POST", "/v1/jobs", job)
        assert status == 201, f"POST /v1/jobs: {status} {body}"
        return body  # type: ignore[no-any-return]

    async def runs(self, job_id: str) -> List[Dict[str, Any]]:
        status, body = await self.call("GET", f"/v1/jobs/{job_id}/runs?limit=1000")
        assert status == 200, f"runs: {status} {body}"
        return body["items"]  # type: ignore[no-any-return]

    async def run(self, run_id: str) -> Dict[str, Any]:
        status, body = await self.call("GET", f"/v1/runs/{run_id}")
        assert status == 200, f"run: {status} {body}"
        return body  # type: ignore[no-any-return]

    async def pause(self, job_id: str) -> None:
        status, body = await self.call("POST", f"/v1/jobs/{job_id}/pause")
        assert status == 200, f"pause: {status} {body}"

    async def trigger(self, job_id: str) -> Dict[str, Any]:
        status, body = await self.call("POST", f"/v1/jobs/{job_id}/trigger")
        assert status in (200, 201, 202), f"trigger: {status} {body}"
        return body  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self.dir.cleanup()


class ConsumerProcess:
    """A consumer process printing JSON event lines; collects them as they come."""

    def __init__(self, argv: Sequence[str], name: str, env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.log_file = tempfile.NamedTemporaryFile(prefix=f"chime-{name}-", suffix=".log", delete=False)
        environment = dict(os.environ)
        environment.update(env or {})
        self.process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=self.log_file, env=environment
        )
        self.events: List[Dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def python(cls, amqp_url: str, group: str, instance: str, *extra: str) -> "ConsumerProcess":
        argv = [sys.executable, str(ADAPTER), "--amqp-url", amqp_url, "--group", group,
                "--instance", instance, *extra]
        return cls(argv, instance, env={"PYTHONPATH": str(PKG / "src")})

    @classmethod
    def rust(cls, amqp_url: str, group: str, instance: str, *extra: str) -> "ConsumerProcess":
        argv = [str(binary("chime-test-consumer")), "--amqp-url", amqp_url, "--group", group,
                "--instance", instance, *extra]
        return cls(argv, f"rust-{instance}")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def of(self, event: str) -> List[Dict[str, Any]]:
        return [e for e in list(self.events) if e.get("event") == event]

    def log(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    async def wait_for(self, what: str, timeout: float, check: Any) -> Any:
        def probe() -> Any:
            if self.process.poll() is not None and not check(list(self.events)):
                raise AssertionError(f"{self.name} exited ({self.process.returncode}) before {what}: {self.log()[-3000:]}")
            return check(list(self.events)) or None

        return await until(f"{what} ({self.name}, log {self.log_file.name})", timeout, probe)

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    async def exit_code(self, timeout: float = 30) -> int:
        await until(f"{self.name} to exit", timeout, lambda: self.process.poll() is not None)
        return int(self.process.returncode)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)
        self.log_file.close()
