"""The sync is exact against ANY server that follows the spec, not only against our own service/.

Every test runs against both servers through one small adapter each:
- "service": our service/ (microsecond stamps, the client's clock, is_archived in list items);
- "spec": tests/spec_server, written from the spec alone (second-precision stamps, a skewable clock and
  Date header, no is_archived in list items, no updated_at on campaigns/products/signals).
KOLs are created, archived (and on the spec server deleted) while the active KOL walk pages; each test
then demands the warehouse equal the server's truth and no failed check.
"""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sync.catalog import CATALOG, KOLS
from sync.progress import ProgressReporter
from sync.schemas import EXTRA_COLUMN
from tests.pipeline.conftest import RunningService, start_service
from tests.pipeline.sync_support import api_items, assert_sent_fields_equal, sync, table_rows
from tests.pipeline.test_api_client_support import add_kols, archive_kols
from tests.spec_server import SpecServer

PER_PAGE = 100  # the sync's page size
ACTIVE_WALK = "kols is_archived=false"  # the progress task of the active KOL walk
SIZES = dict(kols=1050, campaigns=30, products=10, signals=40)


# -- adapters: one per server, the same handles ---------------------------------------------------


class SpecAdapter:
    """tests/spec_server: mutations through its Python API, injection through its page hooks."""

    name = "spec"

    def __init__(self, server: SpecServer):
        self.server = server
        self.base_url, self.api_key = server.base_url, server.api_key

    def create_kols(self, n: int) -> list[str]:
        return self.server.create_kols(n)

    def archive_kols(self, ids: list[str]) -> None:
        self.server.archive_kols(ids)

    def truth(self) -> tuple[dict[str, dict[str, dict[str, Any]]], set[str]]:
        """(resource -> id -> the item as the list endpoint returns it, KOLs active and archived; archived KOL ids)."""
        with self.server.state.lock:  # one consistent moment
            items = {spec.name: {item["id"]: item for item in self.server.truth(spec.name)} for spec in CATALOG}
            return items, self.server.archived_kol_ids()

    def inject_after_page(self, page: int, action: Callable[[], Any]) -> dict[str, Any]:
        """Run `action` once, right after the server computed `page` of the active KOL walk; returns sync kwargs."""
        self.server.on_page("/kols", page, action, params={"is_archived": "false"})
        return {}


class _AfterPage(ProgressReporter):
    """Runs an action once, when the sync reports page `page` of the active KOL walk done."""

    def __init__(self, page: int, action: Callable[[], Any]):
        self.page, self.action, self.fired = page, action, False

    def pages(self, task: str, done: int, total: int | None) -> None:
        if task == ACTIVE_WALK and done >= self.page and not self.fired:
            self.fired = True
            self.action()


class ServiceAdapter:
    """Our service/: mutations through its store, injection through the sync's progress reporter."""

    name = "service"

    def __init__(self, service: RunningService):
        self.service = service
        self.base_url, self.api_key = service.base_url, service.api_key
        self.reporters: list[_AfterPage] = []

    def create_kols(self, n: int) -> list[str]:
        return add_kols(self.service, n)

    def archive_kols(self, ids: list[str]) -> None:
        archive_kols(self.service, ids)

    def truth(self) -> tuple[dict[str, dict[str, dict[str, Any]]], set[str]]:
        """(resource -> id -> the item as the list endpoint returns it, KOLs active and archived; archived KOL ids)."""
        items = {spec.name: api_items(self.service, spec) for spec in CATALOG}
        return items, {kol_id for kol_id, item in items["kols"].items() if item["is_archived"]}

    def inject_after_page(self, page: int, action: Callable[[], Any]) -> dict[str, Any]:
        reporter = _AfterPage(page, action)
        self.reporters.append(reporter)
        return {"progress": reporter}


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _service_template(tmp_path_factory: pytest.TempPathFactory) -> RunningService:
    """One seeded service database per session; each test serves its own copy (seeding takes seconds)."""
    service = start_service(tmp_path_factory.mktemp("exactness_template"), **SIZES)
    service.server.stop()
    return service


def _copy_service(template: RunningService, directory: Path) -> RunningService:
    from service.server import ServiceServer
    from service.settings import ServiceSettings

    db_path = directory / "service.db"
    source, target = sqlite3.connect(template.db_path), sqlite3.connect(db_path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    settings = ServiceSettings(db=db_path, rate_limits_enabled=False, rate_window_seconds=1)
    server = ServiceServer(settings).start()
    return RunningService(base_url=server.base_url, api_key=template.api_key, org_id=template.org_id,
                          db_path=db_path, settings=settings, server=server, seeded=template.seeded)


def _spec_server(random_seed: int) -> SpecServer:
    return SpecServer(kols=SIZES["kols"] - 60, archived_kols=60, campaigns=SIZES["campaigns"],
                      products=SIZES["products"], signals=SIZES["signals"], random_seed=random_seed)


@pytest.fixture(params=["service", "spec"])
def adapter(request, _service_template, tmp_path_factory) -> Iterator[SpecAdapter | ServiceAdapter]:
    if request.param == "spec":
        with _spec_server(random_seed=0) as server:
            yield SpecAdapter(server)
    else:
        service = _copy_service(_service_template, tmp_path_factory.mktemp("exactness_service"))
        try:
            yield ServiceAdapter(service)
        finally:
            service.server.stop()


@pytest.fixture
def spec_adapter() -> Iterator[SpecAdapter]:
    with _spec_server(random_seed=1) as server:
        yield SpecAdapter(server)


# -- helpers ----------------------------------------------------------------------------------------


def _active_in_walk_order(adapter) -> list[str]:
    """Active KOL ids in the order the sync pages them (created_at ascending, ties by id)."""
    truth, archived = adapter.truth()
    kols = truth["kols"]
    return [k["id"] for k in sorted(kols.values(), key=lambda k: (k["created_at"], k["id"])) if k["id"] not in archived]


def _positions(active: list[str], where: str, n: int) -> list[str]:
    """`n` active ids at a place of the walk: first page, across the page 1/2 boundary, or the last page."""
    if where == "first_page":
        return active[10:10 + n]
    if where == "boundary":
        start = PER_PAGE - n // 2 - 1  # straddles the end of page 1 and the start of page 2
        return active[start:start + n]
    if where == "last_page":
        return active[-n:]
    raise ValueError(where)


def assert_warehouse_is_the_truth(adapter, data_dir: Path, summary, archived_during: list[str] = ()) -> None:
    """Same ids for every resource, archived flags right, every field the server sends equal; no failed check."""
    db = data_dir / "analytics.duckdb"
    truth, archived = adapter.truth()
    for spec in CATALOG:
        rows, items = table_rows(db, spec.table), truth[spec.name]
        missing, extra = sorted(set(items) - set(rows)), sorted(set(rows) - set(items))
        assert not missing and not extra, (
            f"{spec.table}: {len(missing)} ids of the server missing from the warehouse {missing[:5]}, "
            f"{len(extra)} ids the server no longer has {extra[:5]}"
        )
        for item_id, item in items.items():
            assert_sent_fields_equal(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
    kols = table_rows(db, KOLS.table)
    wrong = sorted(k for k, row in kols.items() if row["is_archived"] is not (k in archived))
    assert not wrong, f"{len(wrong)} KOLs with the wrong is_archived, e.g. {wrong[:5]}"
    assert all(kols[k]["is_archived"] is True for k in archived_during)
    assert summary.failed_checks == []


# -- 1. creations and archivals that cancel out in the total ---------------------------------------

# The change lands right after page 1: every walk fetches page 1 alone first (it states the total), so
# whatever the lookahead, every later page is requested after the change. Archived rows on page 1 or
# across the page 1/2 boundary shift unfetched rows onto page 1; on the last page they shift nothing.
CANCEL_OUT = [
    pytest.param(1, "first_page", id="1-first_page"),
    pytest.param(5, "boundary", id="5-boundary"),
    pytest.param(40, "first_page", id="40-first_page"),
    pytest.param(40, "last_page", id="40-last_page"),
]


@pytest.mark.parametrize(("n", "where"), CANCEL_OUT)
def test_sync_is_exact_when_as_many_kols_are_created_as_archived_while_paging(adapter, tmp_path, n, where):
    victims = _positions(_active_in_walk_order(adapter), where, n)
    created: list[str] = []

    def churn() -> None:
        adapter.archive_kols(victims)
        created.extend(adapter.create_kols(n))

    summary = sync(adapter, tmp_path / "data", **adapter.inject_after_page(1, churn))

    assert len(created) == n  # the churn really happened during the walk
    assert_warehouse_is_the_truth(adapter, tmp_path / "data", summary, archived_during=victims)


# -- 2. a server clock 10 minutes ahead of or behind the client's -----------------------------------


@pytest.mark.parametrize("offset", [600, -600], ids=["ahead", "behind"])
@pytest.mark.parametrize("churn", [False, True], ids=["quiet", "churn"])
def test_sync_is_exact_whatever_the_server_clock_says(spec_adapter, tmp_path, offset, churn):
    server = spec_adapter.server
    server.clock_offset = offset
    spec_adapter.create_kols(5)  # created just before the sync, by the skewed clock
    server.create("campaigns", 2)
    server.create("signals", 3)
    kwargs: dict[str, Any] = {}
    victims = _positions(_active_in_walk_order(spec_adapter), "first_page", 5) if churn else []
    if churn:
        kwargs = spec_adapter.inject_after_page(1, lambda: (spec_adapter.archive_kols(victims), spec_adapter.create_kols(5)))

    summary = sync(spec_adapter, tmp_path / "data", **kwargs)

    assert_warehouse_is_the_truth(spec_adapter, tmp_path / "data", summary, archived_during=victims)


# -- 3. archivals (and, on the spec server, deletions) only -----------------------------------------


def test_sync_is_exact_when_kols_are_archived_or_deleted_while_paging(adapter, tmp_path):
    active = _active_in_walk_order(adapter)
    victims = _positions(active, "first_page", 3) + _positions(active, "boundary", 4)
    # spec server: also delete rows already fetched (page 1) and one not yet fetched (page 2)
    deleted = active[20:22] + active[150:151] if adapter.name == "spec" else []

    def archive_and_delete() -> None:
        adapter.archive_kols(victims)
        if deleted:
            adapter.server.delete("kols", deleted)

    summary = sync(adapter, tmp_path / "data", **adapter.inject_after_page(1, archive_and_delete))

    assert_warehouse_is_the_truth(adapter, tmp_path / "data", summary, archived_during=victims)
    assert not set(deleted) & set(table_rows(tmp_path / "data" / "analytics.duckdb", KOLS.table))


def test_a_kol_archived_right_after_the_archived_list_is_read_hides_no_missed_active_kol(spec_adapter, tmp_path):
    # The archived KOLs fit on one page. Archiving a KOL already read on active page 1 moves every later
    # active KOL back one place; if the active list's final page is read after that, its first KOL slips
    # onto the page before it, already read, and is missed. Unless the archived list is read after the
    # active list's final page, the archived KOL is in neither list's count, which makes up for the
    # missed KOL and "proves" the walk complete without it.
    # Read last, the archived list's page fires the archival after the walk's end: nothing to miss then.
    victim = _active_in_walk_order(spec_adapter)[10]
    spec_adapter.server.on_page("/kols", 1, lambda: spec_adapter.archive_kols([victim]), params={"is_archived": "true"})

    summary = sync(spec_adapter, tmp_path / "data")

    truth, archived = spec_adapter.truth()
    assert victim in archived  # the archival really happened
    rows = table_rows(tmp_path / "data" / "analytics.duckdb", KOLS.table)
    assert sorted(set(truth["kols"]) - set(rows)) == []
    for kol_id, item in truth["kols"].items():
        if kol_id != victim:  # archived during or after the walk: right as of its end, or named in flux
            assert_sent_fields_equal(item, rows[kol_id], KOLS.schema, f"kols[{kol_id}]")
    assert summary.failed_checks == []


# -- 4. creations only --------------------------------------------------------------------------------


def test_sync_is_exact_when_kols_are_created_while_paging(adapter, tmp_path):
    created: list[str] = []
    summary = sync(adapter, tmp_path / "data", **adapter.inject_after_page(1, lambda: created.extend(adapter.create_kols(40))))

    assert len(created) == 40
    assert_warehouse_is_the_truth(adapter, tmp_path / "data", summary)


# -- 5. nothing changes: one walk per list, no repair --------------------------------------------------


def test_sync_of_a_quiet_server_sends_exactly_one_request_per_page(adapter, tmp_path):
    truth, archived = adapter.truth()

    summary = sync(adapter, tmp_path / "data")

    assert_warehouse_is_the_truth(adapter, tmp_path / "data", summary)
    pages = lambda n: max(1, math.ceil(n / PER_PAGE))  # noqa: E731
    active = len(truth["kols"]) - len(archived)
    assert summary.asset("lake/kols").requests == pages(active) + pages(len(archived))
    for name in ("campaigns", "products", "signals"):
        assert summary.asset(f"lake/{name}").requests == pages(len(truth[name])), name
    if adapter.name == "spec":  # the server's own count agrees with the client's
        assert adapter.server.request_count("/kols") == summary.asset("lake/kols").requests


# -- 6. the real CLI against the spec server -----------------------------------------------------------


def test_commops_sync_cli_against_the_spec_server_exits_0_with_exact_tables(tmp_path):
    with SpecServer(kols=180, archived_kols=15, campaigns=12, products=6, signals=25, random_seed=2) as server:
        adapter = SpecAdapter(server)
        server.create_kols(3)  # recent rows too
        env = {**os.environ, "COMMOPS_API_KEY": server.api_key, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        env.pop("DAGSTER_HOME", None)
        commops = Path(sys.executable).parent / "commops"  # the console script of this environment
        result = subprocess.run(
            [str(commops), "sync", "--data-dir", str(tmp_path / "data"), "--base-url", server.base_url, "--no-progress", "--no-marts"],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        db = tmp_path / "data" / "analytics.duckdb"
        truth, archived = adapter.truth()
        for spec in CATALOG:
            assert set(table_rows(db, spec.table)) == set(truth[spec.name]), spec.table
        kols = table_rows(db, KOLS.table)
        assert {k for k, row in kols.items() if row["is_archived"]} == archived
        details = set(table_rows(db, "kol_details"))  # enriched from the detail shape (contact, metrics)
        active = set(truth["kols"]) - archived
        assert active <= details <= set(truth["kols"])
