"""The side file of a snapshot's changed rows (resources/changed_rows.py), and the merge that reads the rows it
writes from it: the same table as a merge without it, the newer row still winning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from sync.catalog import KOLS
from sync.records import RecordConverter
from resources.changed_rows import changes_of, snapshot_id_of
from resources.digest import content_fields
from resources.lake import StagedSnapshot
from resources.sql import read_parquet
from resources.warehouse import WarehouseSession
from tests.pipeline.sync_support import api_items, sync, table_rows

PAGE = 50
ARCHIVED = (10, 400, 590)  # listed after the active ones (their own list), in one batch spanning every range


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch):
    """Row groups of a page each, so that a batch meets only some of the previous snapshot's."""
    monkeypatch.setattr("resources.lake.ROWS_PER_ROW_GROUP", PAGE)


def _kol(i: int, name: str | None = None, *, updated: str = "2026-05-01T00:00:00Z", fetched: str = "2026-05-02T00:00:00Z") -> dict:
    return {"id": f"kol_{i:04d}", "full_name": name or f"Dr {i}", "specialties": ["cardiology"], "tier": "tier_1",
            "is_archived": i in ARCHIVED, "created_at": (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)).isoformat(),
            "updated_at": updated, "_fetched_at": fetched}


def _listed(rows: list[dict]) -> list[dict]:
    """In the order the two lists page them: active ones by created_at, then archived ones."""
    return [r for r in rows if not r["is_archived"]] + [r for r in rows if r["is_archived"]]


def _night(n: int, count: int = 600) -> list[dict]:
    return [_kol(i, fetched=f"2026-05-0{n + 1}T00:00:00Z") for i in range(count)]


def _write(folder: Path, rows: list[dict], previous: Path | None = None, **finish) -> StagedSnapshot:
    folder.mkdir(parents=True)
    staged = StagedSnapshot(folder, KOLS.schema, key=KOLS.key, newest_by="_fetched_at",
                            digest=content_fields(KOLS.schema, KOLS.observed), previous=previous, sort=KOLS.sort)
    converter = RecordConverter(KOLS.schema)
    for start in range(0, len(rows), PAGE):
        staged.write(converter.to_batch([dict(r) for r in rows[start:start + PAGE]]))
    staged.finish(**finish)
    staged.close()
    return staged


def _ids(path: Path) -> list[str]:
    return sorted(pq.read_table(path, columns=["id"]).column(0).to_pylist())


def test_the_side_file_holds_the_rows_new_or_changed_since_the_previous_snapshot_and_names_its_snapshot(tmp_path):
    first = _write(tmp_path / "night1", _listed(_night(1)))
    assert first.changes is None  # nothing to compare with

    second_rows = _night(2) + [_kol(600, fetched="2026-05-03T00:00:00Z")]  # fetched again, and one new KOL
    for i in (3, 170, 333, 599):
        second_rows[i] = _kol(i, f"Dr {i} (moved)", updated="2026-05-02T12:00:00Z", fetched="2026-05-03T00:00:00Z")
    second = _write(tmp_path / "night2", _listed(second_rows), previous=first.path)

    side = changes_of(second.path)
    assert side == tmp_path / "night2" / "changed" / "data.parquet"
    # Exactly the changed and the new rows: the archived ones, compared in a batch spanning every range,
    # and every row fetched again unchanged are left out.
    assert _ids(side) == ["kol_0003", "kol_0170", "kol_0333", "kol_0599", "kol_0600"]
    assert second.changes.rows_changed == 5 and second.changes.rows_compared == 601
    assert snapshot_id_of(side) == snapshot_id_of(second.path) == second.snapshot_id
    side_rows = pq.read_table(side).to_pylist()
    snapshot_rows = {r["id"]: r for r in pq.read_table(second.path).to_pylist()}
    assert all(row == snapshot_rows[row["id"]] for row in side_rows)  # the snapshot's rows, whole

    # A snapshot replaced while its old side file stays (a re-run between its two renames) is read without it.
    third = _write(tmp_path / "night3", _listed(second_rows), previous=first.path)
    third.path.replace(second.path)
    assert changes_of(second.path) is None


def test_no_side_file_is_kept_when_most_rows_changed_or_the_previous_snapshot_has_another_schema(tmp_path):
    first = _write(tmp_path / "night1", _listed(_night(1)))
    changed = [_kol(i, f"Dr {i} renamed", fetched="2026-05-03T00:00:00Z") for i in range(600)]
    second = _write(tmp_path / "night2", _listed(changed), previous=first.path)
    assert second.changes.abandoned
    assert changes_of(second.path) is None and not (tmp_path / "night2" / "changed" / "data.parquet").exists()

    other = tmp_path / "other.parquet"
    pq.write_table(pq.read_table(first.path).drop_columns(["_extra"]), other)
    assert _write(tmp_path / "night3", _listed(_night(2)), previous=other).changes is None


def test_a_finished_snapshot_that_dropped_rows_or_kept_one_of_an_id_twice_cuts_its_side_file_alike(tmp_path):
    first = _write(tmp_path / "night1", _listed(_night(1)))
    rows = _night(2)
    rows[3] = _kol(3, "Dr 3 (gone from the API)", updated="2026-05-02T12:00:00Z", fetched="2026-05-03T00:00:00Z")
    rows[7] = _kol(7, "Dr 7 as first read", updated="2026-05-02T12:00:00Z", fetched="2026-05-03T00:00:00Z")
    twice = _kol(7, "Dr 7 as read again", updated="2026-05-02T13:00:00Z", fetched="2026-05-03T00:01:00Z")
    second = _write(tmp_path / "night2", _listed(rows) + [twice], previous=first.path,
                    drop=frozenset({"kol_0003"}), repeated_ids=True)
    side = changes_of(second.path)
    assert side is not None
    assert pq.read_table(side, columns=["id", "full_name"]).to_pylist() == [{"id": "kol_0007", "full_name": "Dr 7 as read again"}]


def _table(conn: duckdb.DuckDBPyConnection) -> list[tuple]:
    columns = [f'"{name}"' for (name,) in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'kols' AND column_name <> '_loaded_at' "
        "ORDER BY column_index").fetchall()]
    return sorted(conn.execute(f"SELECT {', '.join(columns)} FROM kols").fetchall(), key=repr)


def test_a_merge_reading_the_side_file_leaves_the_table_a_merge_without_it_leaves(tmp_path):
    first = _write(tmp_path / "night1", _listed(_night(1)))
    rows = _night(2) + [_kol(600, fetched="2026-05-03T00:00:00Z")]
    for i in (3, 170, 333):
        rows[i] = _kol(i, f"Dr {i} (moved)", updated="2026-05-02T12:00:00Z", fetched="2026-05-03T00:00:00Z")
    second = _write(tmp_path / "night2", _listed(rows), previous=first.path)
    side = changes_of(second.path)
    assert side is not None and len(_ids(side)) == 4

    tables, written = {}, {}
    for way, changed in (("with side file", read_parquet(side)), ("without", None)):
        conn = duckdb.connect()
        session = WarehouseSession(conn)
        session.ensure_table(KOLS)
        session.merge(KOLS, read_parquet(first.path), org="default", snapshot_date="2026-05-02")
        # Since the first night: a KOL gone from the table (unchanged in the lake, so not in the side file:
        # read from the snapshot), and a fresher webhook update of one the side file holds (it must win).
        conn.execute("DELETE FROM kols WHERE id = 'kol_0050'")
        conn.execute("UPDATE kols SET full_name = 'Dr 170 by webhook', updated_at = TIMESTAMPTZ '2030-01-01 00:00:00+00' "
                     "WHERE id = 'kol_0170'")
        written[way] = session.merge(KOLS, read_parquet(second.path), org="default", snapshot_date="2026-05-03",
                                     changed_relation=changed)
        # 3, 333 and 600 read from the side file; 50 from the snapshot (170's newer row stays)
        assert session.read_from_changes == (3 if changed else None)
        tables[way] = _table(conn)
        names = dict(conn.execute("SELECT id, full_name FROM kols").fetchall())
        assert names["kol_0050"] == "Dr 50"
        assert names["kol_0170"] == "Dr 170 by webhook"
        assert names["kol_0003"] == "Dr 3 (moved)" and names["kol_0600"] == "Dr 600"
        assert len(names) == 601
    assert written["with side file"] == written["without"] == 4  # 3, 333, 600 from the side file; 50 from the snapshot
    assert tables["with side file"] == tables["without"]


def test_a_second_sync_writes_the_kols_changed_beside_its_snapshot_and_merges_them(make_service, tmp_path):
    from service.store import db
    from service.store.kols import update_kol

    service = make_service(kols=120, campaigns=5, products=5, signals=20)
    data_dir = tmp_path / "data"
    sync(service, data_dir)
    changed = sorted(api_items(service, KOLS))[:3]
    with service.connect() as conn, db.transaction(conn):
        for kol_id in changed:
            update_kol(conn, service.org_id, kol_id, {"full_name": f"Renamed {kol_id}"})

    summary = sync(service, data_dir)

    assert summary.failed_checks == []
    assert summary.asset("lake/kols").metadata["rows_changed_since_previous"] == 3
    assert summary.asset("lake/products").metadata["rows_changed_since_previous"] == 0
    assert summary.asset("warehouse/kols").metadata["rows_read_from_changed_file"] == 3
    assert summary.asset("warehouse/kols").metadata["rows_written"] == 3
    folder = data_dir / "lake" / "org=default" / "kols" / f"snapshot_date={summary.snapshot_date}"
    assert _ids(changes_of(folder / "data.parquet")) == changed
    rows = table_rows(data_dir / "analytics.duckdb", "kols")
    assert {kol_id: rows[kol_id]["full_name"] for kol_id in changed} == {kol_id: f"Renamed {kol_id}" for kol_id in changed}
    assert len(rows) == 120
