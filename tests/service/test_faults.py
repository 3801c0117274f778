"""Fault injection: every kind of fault happens, and a seed reproduces the sequence."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from service import admin
from service.server import ServiceServer
from service.settings import ServiceSettings
from tests.service.conftest import bearer

SLOW_SECONDS = 0.3
RATES = dict(fault_500_rate=0.1, fault_503_rate=0.1, fault_429_rate=0.1, fault_slow_rate=0.1,
             fault_drop_rate=0.1, fault_truncate_rate=0.1, fault_slow_seconds=SLOW_SECONDS)


@pytest.fixture(scope="module")
def faulty_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("faults") / "service.db"
    org = admin.create_org(db, "Faulty", "enterprise")
    return db, admin.create_key(db, org, "all")


def fresh_connections(base_url: str, key: str) -> httpx.Client:
    """A client opening a new connection per request, so a cut connection affects one request only."""
    return httpx.Client(base_url=base_url, headers=bearer(key), timeout=5,
                        limits=httpx.Limits(max_keepalive_connections=0))


def outcome(client: httpx.Client) -> str:
    """What one request experienced: a status, slow, drop or truncate."""
    started = time.monotonic()
    try:
        with client.stream("GET", "/signals") as response:
            try:
                response.read()
            except httpx.RemoteProtocolError:
                return "truncate"
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return "drop"
    if response.status_code == 200 and time.monotonic() - started >= SLOW_SECONDS:
        return "slow"
    if response.status_code == 429:
        assert int(response.headers["retry-after"]) >= 1
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"code", "message", "details"}
    return str(response.status_code)


def run_sequence(db, key, seed: int, n: int = 40) -> list[str]:
    settings = ServiceSettings(db=db, fault_seed=seed, rate_limits_enabled=False, **RATES)
    with ServiceServer(settings) as server, fresh_connections(server.base_url, key) as client:
        return [outcome(client) for _ in range(n)]


def test_the_same_seed_reproduces_the_same_sequence_of_faults(faulty_db):
    db, key = faulty_db
    first = run_sequence(db, key, seed=7)
    assert run_sequence(db, key, seed=7) == first
    assert set(Counter(first)) == {"200", "500", "503", "429", "slow", "drop", "truncate"}, Counter(first)


def test_another_seed_gives_another_sequence(faulty_db):
    db, key = faulty_db
    assert run_sequence(db, key, seed=1, n=20) != run_sequence(db, key, seed=2, n=20)


def test_the_openapi_document_is_never_faulted(faulty_db):
    db, _ = faulty_db
    settings = ServiceSettings(db=db, fault_500_rate=0.5, fault_drop_rate=0.5)
    with ServiceServer(settings) as server, fresh_connections(server.base_url, "unused") as client:
        assert all(client.get("/openapi.json").status_code == 200 for _ in range(10))


def test_no_faults_without_rates(faulty_db):
    db, key = faulty_db
    with ServiceServer(ServiceSettings(db=db)) as server, fresh_connections(server.base_url, key) as client:
        assert not server.settings.faults_enabled
        assert {outcome(client) for _ in range(10)} == {"200"}
