"""Fixtures every test package may use: one real PostgreSQL server per session (tests/postgres.py), one S3 API
server per session (tests/s3.py), and the inbox's two stores for tests that must hold on both."""

from __future__ import annotations

import ctypes.util
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.postgres import PostgresServer, PostgresUnavailable, running_postgres
from tests.s3 import S3Server, running_s3
from resources.inbox import inbox_path


def pytest_configure(config: pytest.Config) -> None:
    """The tests write data directories as the project's own processes do: under the owner-only umask
    every entry point sets (file_modes). A test that needs a looser one sets it in its subprocess."""
    os.umask(0o077)
    _skip_fsync_in_started_processes()


def _skip_fsync_in_started_processes() -> None:
    """The processes started from here on (xdist's workers, and the servers and commands the tests start) run under
    Debian's eatmydata where it is installed: their fsync calls return at once. No test cuts the power, the one
    failure a skipped fsync could show, while the many small runs would each wait on the disk for their commits
    (the warehouse, the inbox, the local service's database)."""
    library = ctypes.util.find_library("eatmydata")
    preloaded = os.environ.get("LD_PRELOAD", "").split()
    if library and library not in preloaded:
        os.environ["LD_PRELOAD"] = " ".join([*preloaded, library])


@pytest.fixture(autouse=True)
def _umask_kept() -> Iterator[None]:
    """The commops entry points set the process umask (file_modes): a test running one in this process
    (CliRunner, the code location's defs()) leaves the umask of the tests after it as it found it."""
    mask = os.umask(0o022)
    os.umask(mask)
    yield
    os.umask(mask)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the session (take a database of your own: create_database).
    Without the server binaries: fails when $CI is set (CI installs them), skips elsewhere."""
    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailable as missing:
        if os.environ.get("CI"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@dataclass(frozen=True)
class InboxStore:
    """One of the inbox's stores for a test: `url` is None for the SQLite file, else a Postgres database of
    its own (the session's server). `location(data_dir)` is what Inbox(...) is given."""

    name: str
    url: str | None

    def location(self, data_dir: Path) -> str | Path:
        return self.url or inbox_path(data_dir)


@pytest.fixture(params=["sqlite", "postgres"])
def inbox_store(request: pytest.FixtureRequest) -> InboxStore:
    """Each inbox test once per store: the SQLite file (default) and Postgres (COMMOPS_INBOX_URL)."""
    if request.param == "sqlite":
        return InboxStore("sqlite", None)
    server: PostgresServer = request.getfixturevalue("postgres")
    return InboxStore("postgres", server.create_database(f"inbox_{uuid.uuid4().hex[:12]}"))
@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """An S3 API server (moto) on 127.0.0.1 for the session (take a bucket of your own: create_bucket)."""
    with running_s3() as server:
        yield server
