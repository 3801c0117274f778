"""Fixtures every test package may use: one real PostgreSQL server per session (tests/postgres.py), one S3 API
server per session (tests/s3.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres import PostgresServer, PostgresUnavailable, running_postgres
from tests.s3 import S3Server, running_s3


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


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """An S3 API server (moto) on 127.0.0.1 for the session (take a bucket of your own: create_bucket)."""
    with running_s3() as server:
        yield server
