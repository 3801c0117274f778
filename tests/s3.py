"""A real S3 API server for tests: moto's server mode (`moto[server]`, the dev extra) on a free 127.0.0.1 port.

`tests/conftest.py` exposes one server per session as the `s3` fixture; each user takes a bucket of its
own (`create_bucket`), so tests sharing the server share no objects. `env()` is what a process needs to
reach it: the standard AWS variables (an endpoint, a region and throwaway credentials moto accepts).

`HoldingProxy` sits between a client and the server and holds back the first request whose request
line matches a pattern (never forwarding it), so a test can kill a writer at an exact point of its
protocol, e.g. after its data is uploaded and before its commit marker is.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.processes import terminate
from tests.waiting import wait_until

START_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """A started S3 API server on 127.0.0.1:`port`."""

    port: int
    host: str = "127.0.0.1"

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self, endpoint_url: str | None = None) -> dict[str, str]:
        """The standard AWS variables pointing at this server (or at `endpoint_url`, e.g. a proxy before it)."""
        return {
            "AWS_ENDPOINT_URL": endpoint_url or self.endpoint_url,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing-secret",
        }

    def create_bucket(self, prefix: str = "test") -> str:
        """A new empty bucket; its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        httpx.put(f"{self.endpoint_url}/{name}", timeout=10).raise_for_status()
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (plain ListObjectsV2, not the code under test)."""
        keys, token = [], None
        while True:
            params = {"list-type": "2", "prefix": prefix} | ({"continuation-token": token} if token else {})
            body = httpx.get(f"{self.endpoint_url}/{bucket}", params=params, timeout=10).raise_for_status().text
            keys += re.findall(r"<Key>([^<]+)</Key>", body)
            token = next(iter(re.findall(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", body)), None)
            if token is None:
                return sorted(keys)

    def get(self, bucket: str, key: str) -> bytes:
        return httpx.get(f"{self.endpoint_url}/{bucket}/{key}", timeout=10).raise_for_status().content


@contextmanager
def running_s3(server_env: dict[str, str] | None = None) -> Iterator[S3Server]:
    """Start moto's server (with `server_env` added to its environment); stop it on exit."""
    from tests.service.webhook_support import free_port

    # moto logs a line per request to stderr: a file, never an unread pipe (once its buffer is full the
    # server blocks on the next log line and every client hangs).
    log = tempfile.TemporaryFile()
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        log.seek(0)
        log.truncate()
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=log, env=os.environ | (server_env or {}))
        server = S3Server(port)
        try:
            wait_until(lambda: process.poll() is not None or _answers(server), 30, 0.05, what="moto's S3 server")
        except AssertionError:
            process.kill()
            raise
        if process.poll() is None:
            break
        if attempt == START_ATTEMPTS:
            log.seek(0)
            raise RuntimeError(f"moto's S3 server did not start: {log.read()[-2000:].decode(errors='replace')}")
    try:
        yield server
    finally:
        log.close()
        terminate(process, timeout=10)


def _answers(server: S3Server) -> bool:
    try:
        httpx.get(server.endpoint_url, timeout=1)  # any answer will do: with credentials checked it is an error
        return True
    except httpx.HTTPError:
        return False


class HoldingProxy:
    """A TCP proxy on a free 127.0.0.1 port in front of `server`. Bytes pass both ways unchanged until a
    client sends a request whose request line matches `hold`: that request is never forwarded (its
    connection hangs) and `held` is set. Stop it with `close()`."""

    def __init__(self, server: S3Server, hold: str):
        self._target = (server.host, server.port)
        self._hold = re.compile(hold.encode())
        self.held = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed.set()
        for sock in list(self._sockets):
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        holding = False
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is upstream:
                        client.sendall(data)
                    elif not holding:
                        # A new request starts a chunk (clients wait for each response): its line is at the front.
                        if self._hold.match(data.split(b"\r\n", 1)[0]):
                            holding = True
                            self.held.set()
                        else:
                            upstream.sendall(data)
        except OSError:
            return
        finally:
            if not holding:
                client.close()
                upstream.close()


def killed_at_request(s3: S3Server, hold: str, args: list[str], env: dict[str, str], log: Path, what: str,
                      cwd: Path | None = None) -> None:
    """`args` run in a process of its own (`env` plus the AWS variables) whose S3 requests pass through a
    HoldingProxy holding the first one matching `hold`, killed (SIGKILL) as that request is sent. Its stderr
    goes to the file `log` (never a pipe nobody reads while it runs); AssertionError if it ended first."""
    with HoldingProxy(s3, hold=hold) as proxy:
        with open(log, "w") as stderr:
            killed = subprocess.Popen(args, cwd=cwd, env=env | s3.env(proxy.endpoint_url),
                                      stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_until(lambda: proxy.held.is_set() or killed.poll() is not None, 180, 0.05, what=what)
            assert proxy.held.is_set(), f"the process ended before {what}: {log.read_text()[-2000:]}"
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=30)
