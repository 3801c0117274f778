"""Fixtures every test package may use: one real PostgreSQL server per session (tests/postgres.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres import PostgresServer, PostgresUnavailable, running_postgres


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
