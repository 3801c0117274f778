"""A real load balancer for tests and benchmarks: Debian's haproxy in front of receivers on 127.0.0.1.

The config is generated into a temporary directory (free ports; `-db`: in the foreground, no daemon)
and has the settings of docs/deploy.md's example: round robin, `GET /healthz` checked every 200 ms, a server
taken out after 2 failed checks; a request whose connection to a dead server fails is sent to
another (`retries`, `option redispatch`). `running_haproxy` stops it and removes the directory.
`stats()` reads haproxy's own CSV statistics: per server its state (UP, DOWN) and sessions served.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.processes import terminate
from tests.waiting import wait_until

INSTALL = "apt-get update && apt-get install -y haproxy"
CONFIG = """\
global
    maxconn 1024

defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch

frontend receivers
    bind 127.0.0.1:{port}
    default_backend receivers

backend receivers
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 200ms fall 2 rise 2
{servers}

frontend stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
"""


class HaproxyUnavailable(RuntimeError):
    """No haproxy on this machine; the message says how to install it."""


@dataclass(frozen=True)
class LoadBalancer:
    port: int
    stats_port: int
    config: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, dict[str, str]]:
        """{server name: haproxy's CSV row} for the receivers' servers (status, stot: sessions, ...)."""
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5).text.lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {row["svname"]: row for row in rows if row["pxname"] == "receivers" and row["svname"] not in ("FRONTEND", "BACKEND")}


def find_haproxy() -> str:
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).exists()), None)
    if found is None:
        raise HaproxyUnavailable(f"haproxy not found: {INSTALL}")
    return found


@contextmanager
def running_haproxy(backends: list[int], port: int | None = None) -> Iterator[LoadBalancer]:
    """haproxy on `port` (default: a free one) balancing over the receivers on `backends` (ports on
    127.0.0.1), returned once it sees every receiver UP."""
    from tests.service.webhook_support import free_port

    binary = find_haproxy()
    directory = Path(tempfile.mkdtemp(prefix="commops-haproxy-"))
    servers = "\n".join(f"    server rx{n} 127.0.0.1:{port} check" for n, port in enumerate(backends, 1))
    port, stats_port = port or free_port(), free_port()
    balancer = LoadBalancer(port, stats_port, CONFIG.format(port=port, stats_port=stats_port, servers=servers))
    (directory / "haproxy.cfg").write_text(balancer.config)
    log = open(directory / "haproxy.log", "w")
    process = subprocess.Popen([binary, "-db", "-f", str(directory / "haproxy.cfg")], stdout=log, stderr=subprocess.STDOUT)
    try:
        def serving() -> bool:
            assert process.poll() is None, f"haproxy exited: {(directory / 'haproxy.log').read_text()[-2000:]}"
            try:
                return all(row["status"] == "UP" for row in balancer.stats().values())
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=20, interval=0.05, what="haproxy with every receiver UP")
        yield balancer
    finally:
        terminate(process, timeout=10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
