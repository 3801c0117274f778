"""A real PostgreSQL server for tests: initdb and pg_ctl in a temporary directory, on a free 127.0.0.1 port.

The binaries are Debian's `postgresql` package (/usr/lib/postgresql/<version>/bin; `.ci/run` installs it
where it is missing). initdb refuses to run as root, so as root the cluster is created and run by the
`postgres` user (runuser). `-c fsync=off`: a test server need not survive a power cut. The server and
its directory are removed when the context exits, a failed test included.

`tests/conftest.py` exposes one server per session as the `postgres` fixture; each user takes a
database of its own (`create_database`), so tests sharing the server share no tables.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTALL = "apt-get update && apt-get install -y postgresql"
PREFERRED_VERSION = "15"
SERVER_USER = "postgres"
START_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine; the message says how to install them."""


@dataclass(frozen=True)
class PostgresServer:
    """A started server: superuser `postgres`, trust authentication, on 127.0.0.1:`port`."""

    port: int
    directory: Path
    bin_dir: Path
    host: str = "127.0.0.1"

    def url(self, database: str = "postgres", driver: str = "psycopg2") -> str:
        """A SQLAlchemy URL naming its driver (a bare postgresql:// means psycopg 3 to SQLAlchemy 2.1)."""
        return f"postgresql+{driver}://{SERVER_USER}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database `name` (it must not exist) and return its URL."""
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def execute(self, sql: str, database: str = "postgres", params: Any = None) -> list[tuple]:
        """Run one statement in autocommit mode; the rows it returns (none for DDL)."""
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=SERVER_USER, dbname=database)
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall() if cursor.description else []
        finally:
            conn.close()


def find_bin_dir() -> Path:
    """The directory holding initdb and pg_ctl: Debian's versioned directory (15 first), else PATH."""
    debian = Path("/usr/lib/postgresql")
    versions = sorted((p for p in debian.glob("*/bin") if (p / "initdb").exists()), key=lambda p: p.parent.name)
    preferred = [p for p in versions if p.parent.name == PREFERRED_VERSION]
    if preferred or versions:
        return (preferred or versions)[-1]
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    raise PostgresUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl) not found: {INSTALL}")


@contextmanager
def running_postgres(durable: bool = False) -> Iterator[PostgresServer]:
    """Start a throwaway server; stop it and delete its directory on exit. `durable`: fsync on, as in
    production (benchmarks comparing commits with SQLite's synchronous=FULL); tests leave it off."""
    from tests.service.webhook_support import free_port

    bin_dir = find_bin_dir()
    directory = Path(tempfile.mkdtemp(prefix="commops-postgres-"))
    try:
        as_root = os.geteuid() == 0
        if as_root:
            server_user = pwd.getpwnam(SERVER_USER)
            os.chown(directory, server_user.pw_uid, server_user.pw_gid)
        data = directory / "data"
        _run(bin_dir, as_root, "initdb", "-D", str(data), "-A", "trust", "-U", SERVER_USER, "--no-sync")
        server = _start(bin_dir, as_root, directory, data, free_port, durable)
        try:
            yield server
        finally:
            _run(bin_dir, as_root, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _start(bin_dir: Path, as_root: bool, directory: Path, data: Path, free_port: Any, durable: bool) -> PostgresServer:
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1"
        if not durable:
            options += " -c fsync=off -c full_page_writes=off"
        try:
            _run(bin_dir, as_root, "pg_ctl", "-D", str(data), "-o", options, "-l", str(directory / "server.log"), "-w", "start")
            return PostgresServer(port=port, directory=directory, bin_dir=bin_dir)
        except subprocess.CalledProcessError:
            if attempt == START_ATTEMPTS:
                log = directory / "server.log"
                raise RuntimeError(f"PostgreSQL did not start: {log.read_text()[-2000:] if log.exists() else 'no log'}") from None
    raise AssertionError("unreachable")


def _run(bin_dir: Path, as_root: bool, program: str, *args: str) -> None:
    command = [str(bin_dir / program), *args]
    if as_root:
        command = ["runuser", "-u", SERVER_USER, "--", *command]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=60, cwd="/")
