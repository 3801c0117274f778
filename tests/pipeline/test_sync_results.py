"""A full sync against the seeded service: the warehouse equals the API's data field by field."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from sync.catalog import CATALOG, KOL_DETAILS
from resources.digest import DIGEST_FIELD
from resources.warehouse import row_digest
from tests.pipeline.sync_support import (
    api_detail,
    api_items,
    assert_row_equals_item,
    assert_same_value,
    query,
    sync,
    table_rows,
)


@pytest.fixture(scope="module")
def synced(seeded_service, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("full_sync")
    summary = sync(seeded_service, data_dir, enrich_details_limit=10_000, marts=True)
    return seeded_service, data_dir, summary


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_full_sync_tables_equal_the_api_field_by_field(synced, spec):
    service, data_dir, summary = synced
    items = api_items(service, spec)
    rows = table_rows(data_dir / "analytics.duckdb", spec.table)
    assert items, f"the seed has no {spec.name}"
    assert set(rows) == set(items)
    for item_id, item in items.items():
        assert_row_equals_item(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
        assert str(rows[item_id]["_snapshot_date"]) == summary.snapshot_date


def test_kols_include_archived_ones_with_their_flag(synced):
    _, data_dir, _ = synced
    counts = dict(query(data_dir / "analytics.duckdb", "SELECT is_archived, count(*) FROM kols GROUP BY 1"))
    assert counts.get(True, 0) > 0 and counts.get(False, 0) > 0


def test_child_tables_flatten_market_status_and_product_relevance(synced):
    service, data_dir, _ = synced
    db = data_dir / "analytics.duckdb"
    products = api_items(service, next(s for s in CATALOG if s.name == "products"))
    expected = sorted(
        (pid, market, v.get("status"), v.get("clearance_number"), v.get("ce_mark"))
        for pid, p in products.items()
        for market, v in p["market_status"].items()
    )
    assert expected
    assert sorted(query(db, "SELECT product_id, market, status, clearance_number, ce_mark FROM product_market_status")) == expected
    signals = api_items(service, next(s for s in CATALOG if s.name == "signals"))
    expected = sorted(
        (sid, r["product_id"], r["product_name"], r["relevance_type"], float(r["relevance_score"]))
        for sid, s in signals.items()
        for r in s["product_relevance"]
    )
    assert expected
    assert sorted(query(db, "SELECT signal_id, product_id, product_name, relevance_type, relevance_score "
                        "FROM signal_product_relevance")) == expected


@pytest.mark.parametrize("table", ["kols", "campaigns", "products", "signals", "kol_details",
                                   "product_market_status", "signal_product_relevance"])
def test_every_row_a_nightly_writes_carries_its_load_columns(synced, table):
    _, data_dir, summary = synced
    columns = {"_snapshot_date", "_loaded_at"} | ({"_fetched_at"} if not table.startswith(("product_", "signal_")) else set())
    nulls = query(data_dir / "analytics.duckdb",
                  f"SELECT count(*), {', '.join(f'count(*) FILTER (WHERE {c} IS NULL)' for c in sorted(columns))} FROM {table}")
    rows, *null_counts = nulls[0]
    assert rows > 0 and null_counts == [0] * len(columns), f"{table}: NULLs in {sorted(columns)}: {null_counts}"
    (date,) = query(data_dir / "analytics.duckdb", f"SELECT DISTINCT _snapshot_date FROM {table}")[0]
    assert str(date) == summary.snapshot_date


def test_kol_details_equal_the_detail_endpoint(synced):
    service, data_dir, summary = synced
    details = table_rows(data_dir / "analytics.duckdb", "kol_details")
    active = {r[0] for r in query(data_dir / "analytics.duckdb", "SELECT id FROM kols WHERE NOT is_archived")}
    assert set(details) == active
    for kol_id in sorted(active)[:25]:
        item = api_detail(service, kol_id)
        row = details[kol_id]
        for f in KOL_DETAILS.schema:
            if f.name in ("enriched_at", "_fetched_at", "_extra"):
                continue
            assert_same_value(item.get(f.name), row[f.name], f.type, f"kol_details[{kol_id}].{f.name}")
    assert "pending" not in summary.asset("warehouse/kol_details").note


def test_every_check_passes_and_metadata_counts_requests(synced):
    _, _, summary = synced
    assert summary.failed_checks == []
    kols = summary.asset("lake/kols")
    assert kols.rows > 0 and kols.requests >= 2  # two walks
    assert kols.rate_limited == 0 and kols.duration_seconds > 0
    assert summary.asset("warehouse/kols").rows == kols.rows


def test_every_table_view_and_column_has_a_comment(synced):
    _, data_dir, _ = synced
    db = data_dir / "analytics.duckdb"
    uncommented_tables = query(db, "SELECT table_name FROM duckdb_tables() WHERE comment IS NULL")
    uncommented_views = query(db, "SELECT view_name FROM duckdb_views() WHERE NOT internal AND comment IS NULL")
    uncommented_columns = query(
        db,
        "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal AND comment IS NULL "
        "AND schema_name = 'main'",
    )
    assert (uncommented_tables, uncommented_views, uncommented_columns) == ([], [], [])


def test_history_views_read_every_snapshot(synced):
    _, data_dir, _ = synced
    db = data_dir / "analytics.duckdb"
    for spec in CATALOG:
        ((snapshots, rows),) = query(db, f"SELECT count(DISTINCT snapshot_date), count(*) FROM {spec.history_view}")
        assert snapshots == 1
        assert rows == query(db, f"SELECT count(*) FROM {spec.table}")[0][0]


def test_lake_snapshot_has_the_explicit_schema_and_each_rows_digest(synced):
    """The explicit schema, then `_digest`: each row's content hashed as it was written, equal to the hash the
    warehouse computes from the same row read back (so a later merge compares digests, not rows) and to the
    table's own digest of it."""
    _, data_dir, summary = synced
    for spec in CATALOG:
        folder = data_dir / "lake" / "org=default" / spec.name / f"snapshot_date={summary.snapshot_date}"
        files = sorted(p.name for p in folder.iterdir())
        assert files == ["data.parquet"]
        schema = pq.read_schema(folder / "data.parquet")
        assert schema.remove_metadata().equals(spec.schema.append(DIGEST_FIELD).remove_metadata(), check_metadata=False)
        assert not list((data_dir / "lake" / ".staging").glob("*"))
        snapshot = f"read_parquet('{folder / 'data.parquet'}')"
        ((rows, differ),) = query(data_dir / "warehouse.duckdb",
                                  f"SELECT count(*), count(*) FILTER (WHERE _digest <> {row_digest(spec)}) FROM {snapshot}")
        assert rows > 0 and differ == 0, spec.name
        ((in_table, differ),) = query(data_dir / "warehouse.duckdb",
                                      f"SELECT count(*), count(*) FILTER (WHERE t._digest <> s._digest) FROM {spec.table} t "
                                      f"JOIN {snapshot} s USING (id)")
        assert in_table == rows and differ == 0, spec.name


def test_extra_is_a_json_column_and_null_where_the_api_sent_no_unknown_field(synced):
    """The seeded service sends only known fields; with unknown ones: test_sync_resilience.py."""
    _, data_dir, _ = synced
    db = data_dir / "analytics.duckdb"
    for table in [spec.table for spec in CATALOG] + [KOL_DETAILS.table]:
        ((rows, with_extra),) = query(db, f"SELECT count(*), count(_extra) FROM {table}")
        assert rows > 0 and with_extra == 0, table
        ((type_,),) = query(db, f"SELECT data_type FROM duckdb_columns() WHERE table_name = '{table}' "
                                "AND column_name = '_extra'")
        assert type_ == "JSON", table


def test_the_example_queries_of_the_analyst_guide_run(synced):
    import re
    from pathlib import Path

    _, data_dir, _ = synced
    guide = (Path(__file__).parents[2] / "docs" / "analysts.md").read_text()
    statements = [s.strip() for block in re.findall(r"```sql\n(.*?)```", guide, re.S) for s in block.split(";") if s.strip()]
    assert len(statements) >= 6
    for statement in statements:
        query(data_dir / "analytics.duckdb", statement)
