"""Lists read ahead: once a list's pages are in, its step starts the run's next list on a thread of its own,
so the fetch does not pause while the step publishes its snapshot and Dagster starts the next step."""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest

from sync.catalog import FETCH_ORDER
from assets.lake import SNAPSHOT_ASSETS
from commops_cli.sync_checks import SyncError
from commops_cli.sync_run import run_sync
from pipelines.definitions import build_resources
from resources.commops_api._read_ahead import ReadAhead
from resources.settings import load_settings
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import api_key_in_env, query, sync, warehouse_state, with_orgs


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    service = start_service(tmp_path_factory.mktemp("service"), kols=300, campaigns=40, products=12, signals=300)
    yield service
    service.server.stop()


def _alone(service, data_dir, name: str):
    """A run of one list's snapshot: nothing to read ahead."""
    settings = load_settings(base_url=service.base_url, data_dir=str(data_dir))
    (asset,) = [a for a in SNAPSHOT_ASSETS if a.key.path[-1] == name]
    with api_key_in_env(service.api_key):
        result = dg.materialize(SNAPSHOT_ASSETS, selection=[asset.key], partition_key="default",
                                instance=with_orgs(dg.DagsterInstance.ephemeral()), resources=build_resources(settings))
    (event,) = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_each_list_after_the_first_is_read_ahead_and_counts_only_its_own_requests(service, tmp_path):
    summary = sync(service, tmp_path / "nightly")
    for name in FETCH_ORDER:
        nightly = summary.asset(f"lake/{name}")
        assert nightly.metadata["read_ahead"] is (name != FETCH_ORDER[0]), name
        alone = _alone(service, tmp_path / name, name)
        assert alone["read_ahead"] is False
        # Every request is the list's own, none of the next list's: the same as when the list runs alone.
        assert (nightly.requests, nightly.rows) == (alone["requests"], alone["dagster/row_count"]), name
    state = warehouse_state(tmp_path / "nightly" / "warehouse.duckdb")
    assert {table: len(state[table]) for table in ("kols", "signals", "campaigns", "products")} == {
        "kols": 300, "signals": 300, "campaigns": 40, "products": 12}


def test_a_list_read_ahead_that_fails_fails_its_own_step_with_the_apis_message(tmp_path):
    """The campaigns' step reads the signals ahead with a key lacking signals:read: the 403 is raised by the
    signals' step, naming the scope, and the lists after it are still fetched."""
    service = start_service(tmp_path / "service", kols=120, campaigns=5, products=4, signals=5)
    try:
        key = service.create_key(["kols:read", "campaigns:read", "products:read"])
        with api_key_in_env(key), pytest.raises(SyncError, match="signals:read") as failed:
            run_sync(base_url=service.base_url, data_dir=tmp_path / "data", progress=False, enrich_details_limit=0,
                     instance=dg.DagsterInstance.ephemeral())
        assert "403" in str(failed.value)
        db = tmp_path / "data" / "warehouse.duckdb"
        assert query(db, "SELECT count(*) FROM kols") == [(120,)]
        assert query(db, "SELECT count(*) FROM campaigns") == [(5,)]
    finally:
        service.server.stop()


def test_read_ahead_yields_in_order_then_the_error_its_iterator_raised():
    def items():
        yield from range(5)
        raise ValueError("page 6 unreadable")

    for depth in (2, 10):  # the error met on the reader's thread, or already read ahead
        ahead = ReadAhead(items(), depth=depth, name="test")
        _wait_until(lambda: not ahead.running or ahead.ahead >= depth)
        read = []
        with pytest.raises(ValueError, match="page 6 unreadable"):
            for item in ahead:
                read.append(item)
        assert read == [0, 1, 2, 3, 4]


def test_the_reader_takes_the_iterator_back_and_reads_the_rest_on_its_own_thread():
    """Only the head of a list is read on the read-ahead thread: from the reader's first read on, the pages
    are fetched and decoded where they were before (the step's thread, its memory)."""
    produced_on: list[str] = []

    def items():
        for n in range(20):
            produced_on.append(threading.current_thread().name)
            yield n

    ahead = ReadAhead(items(), depth=4, name="read-ahead test")
    _wait_until(lambda: ahead.ahead >= 4)
    assert list(ahead) == list(range(20)) and not ahead.running
    assert produced_on[:4] == ["read-ahead test"] * 4
    assert set(produced_on[5:]) == {threading.current_thread().name}


def test_a_read_ahead_nobody_reads_stops_when_closed_and_closes_its_iterator():
    """A run that ends before the step that would read it: the thread, waiting with its depth read, ends."""
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    ahead = ReadAhead(endless(), depth=3, name="test")
    _wait_until(lambda: ahead.ahead >= 3)
    time.sleep(0.05)
    assert ahead.ahead == 3 and ahead.running  # no further than its depth
    ahead.close()
    assert not ahead.running and closed.is_set()


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
