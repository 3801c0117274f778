"""The nightly sync lands while KOLs keep being created and archived, and meets its guarantee (docs/spec-decisions.md#api-client).

Against both servers (our service/ and the spec server), with every request slowed so that each walk
overlaps many changes. The guarantee is checked against the change log (tests/pipeline/churn.py).
Also: a quiet server stamping its newest rows hours ahead of its own Date header syncs exactly, with one
request per page; timestamps without a zone designator read as UTC; a value that cannot be read is kept
and counted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sync.catalog import CATALOG, KOLS
from tests.pipeline.churn import Churn, assert_guarantee
from tests.pipeline.sync_support import assert_sent_fields_equal, sync, table_rows
from tests.pipeline.test_api_client_support import add_kols, archive_kols
from tests.spec_server import SpecServer

KOLS_ACTIVE, KOLS_ARCHIVED = 950, 50
LATENCY = 0.08  # seconds per request: a walk of the active list overlaps dozens of changes


class _Server:
    """What a churn test needs of a server: mutations, the KOLs now, where it listens."""

    def __init__(self, name: str, base_url: str, api_key: str, kols: Any, create: Any, archive: Any):
        self.name, self.base_url, self.api_key = name, base_url, api_key
        self.kols, self.create, self.archive = kols, create, archive


@pytest.fixture(params=["service", "spec"])
def slow_server(request, make_service) -> Iterator[_Server]:
    if request.param == "spec":
        with SpecServer(kols=KOLS_ACTIVE, archived_kols=KOLS_ARCHIVED, campaigns=5, products=5, signals=10,
                        random_seed=3) as server:
            server.latency = LATENCY

            def kols() -> tuple[set[str], set[str]]:
                archived = server.archived_kol_ids()
                return set(server.active_kol_ids()), archived

            yield _Server("spec", server.base_url, server.api_key, kols, server.create_kols, server.archive_kols)
    else:
        service = make_service(kols=KOLS_ACTIVE + KOLS_ARCHIVED, campaigns=5, products=5, signals=10,
                               fault_slow_rate=1.0, fault_slow_seconds=LATENCY)

        def kols() -> tuple[set[str], set[str]]:
            conn = service.connect()
            try:
                rows = conn.execute("SELECT id, is_archived FROM kols WHERE org_id = ?", (service.org_id,)).fetchall()
            finally:
                conn.close()
            return {i for i, a in rows if not a}, {i for i, a in rows if a}

        yield _Server("service", service.base_url, service.api_key, kols,
                      lambda n: add_kols(service, n), lambda ids: archive_kols(service, ids))


@pytest.mark.parametrize(
    ("creations", "archivals"),
    [pytest.param(12.0, 0.0, id="creations_only"), pytest.param(12.0, 12.0, id="creations_and_archivals")],
)
def test_the_nightly_lands_and_meets_its_guarantee_while_kols_keep_changing(slow_server, tmp_path, creations, archivals):
    active, archived = slow_server.kols()
    with Churn(slow_server.create, slow_server.archive, sorted(active), creations, archivals, seed=7) as churn:
        summary = sync(slow_server, tmp_path / "data")

    lake = summary.asset("lake/kols").metadata
    rows = table_rows(tmp_path / "data" / "analytics.duckdb", KOLS.table)
    counts = assert_guarantee(rows, churn, active, archived, lake)
    assert summary.failed_checks == []
    assert lake["complete"] is True
    assert counts["changed_during"] >= 5, f"too little changed during the walk to test anything: {counts}"
    if archivals:
        assert churn.count("archived") >= 5


def test_a_quiet_server_stamping_rows_hours_ahead_of_its_clock_syncs_exactly_with_one_request_per_page(tmp_path):
    with SpecServer(kols=420, archived_kols=20, campaigns=8, products=4, signals=130, random_seed=5) as server:
        server.create("kols", 40, stamped_ahead=2 * 3600)  # a database clock two hours ahead of the Date header
        server.create("signals", 40, stamped_ahead=2 * 3600)
        env = {**os.environ, "COMMOPS_API_KEY": server.api_key, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        env.pop("DAGSTER_HOME", None)
        result = subprocess.run(
            [str(Path(sys.executable).parent / "commops"), "sync", "--data-dir", str(tmp_path / "data"),
             "--base-url", server.base_url, "--no-progress", "--no-marts"],
            env=env, capture_output=True, text=True, timeout=180,
        )
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        db = tmp_path / "data" / "analytics.duckdb"
        for spec in CATALOG:
            truth = {item["id"]: item for item in server.truth(spec.name)}
            rows = table_rows(db, spec.table)
            assert set(rows) == set(truth), spec.table
            for item_id, item in truth.items():
                assert_sent_fields_equal(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
        pages = lambda n: max(1, math.ceil(n / 100))  # noqa: E731
        assert server.request_count("/kols") == pages(460) + pages(20)
        assert server.request_count("/signals") == pages(170)


def test_timestamps_without_a_zone_designator_read_as_utc_and_unreadable_values_are_kept_and_counted(tmp_path):
    with SpecServer(kols=240, archived_kols=10, campaigns=12, products=6, signals=40, random_seed=9,
                    naive_timestamps=0.3) as server:
        truth = {spec.name: {item["id"]: item for item in server.truth(spec.name)} for spec in CATALOG}
        naive = [i for i, item in truth["kols"].items() if not item["created_at"].endswith("Z")]
        assert naive, "the server wrote no timestamp without a zone designator"
        garbled = sorted(i for i, item in truth["kols"].items() if item["last_interaction"])[0]
        with server.state.lock:
            server.state._records["kols"][garbled]["last_interaction"] = "sometime last week"
        truth["kols"][garbled]["last_interaction"] = None  # what the column holds: the raw value is in _extra

        summary = sync(server, tmp_path / "data")

    db = tmp_path / "data" / "analytics.duckdb"
    for spec in CATALOG:
        rows = table_rows(db, spec.table)
        assert set(rows) == set(truth[spec.name]), spec.table
        for item_id, item in truth[spec.name].items():
            if item_id != garbled:
                assert_sent_fields_equal(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
    assert json.loads(rows_of(db, garbled)["_extra"]) == {"last_interaction": "sometime last week"}
    assert rows_of(db, garbled)["last_interaction"] is None
    assert summary.asset("lake/kols").metadata["unreadable_values"] == {"last_interaction": 1}
    assert summary.asset("lake/signals").metadata["unreadable_values"] == {}
    assert summary.failed_checks == []


def rows_of(db: Path, kol_id: str) -> dict[str, Any]:
    return table_rows(db, KOLS.table)[kol_id]
