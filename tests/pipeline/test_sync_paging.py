"""Pagination edges through the whole pipeline: 0, 1, 100, 101 and 1,000 rows per resource."""

from __future__ import annotations

import math

import pytest

from sync.catalog import CATALOG
from tests.pipeline.sync_support import query, sync


@pytest.mark.parametrize("rows", [0, 1, 100, 101, 1000])
def test_sync_loads_every_row_at_pagination_edges(make_service, tmp_path, rows):
    service = make_service(kols=rows, campaigns=rows, products=rows, signals=rows)
    summary = sync(service, tmp_path / "data")

    assert summary.failed_checks == []
    db = tmp_path / "data" / "analytics.duckdb"
    for spec in CATALOG:
        assert query(db, f"SELECT count(*), count(DISTINCT id) FROM {spec.table}") == [(rows, rows)], spec.name
        assert summary.asset(f"lake/{spec.name}").rows == rows
    # One request per page, no extra empty-page request (single-walk resources).
    for name in ("campaigns", "products", "signals"):
        assert summary.asset(f"lake/{name}").requests == max(1, math.ceil(rows / 100)), name
