"""The current-state tables as Iceberg tables (COMMOPS_ICEBERG_*, resources/iceberg.py), against a real
Postgres (the SQL catalog) and a real S3 API server (moto): read back from another process, each equals
its table in analytics.duckdb after a nightly sync and again after webhook updates; a publish from an
older warehouse never replaces a newer row."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from sync.catalog import ICEBERG_TABLES
from resources.iceberg import ICEBERG_CASTS, IcebergResource, open_catalog
from resources.settings import ICEBERG_CATALOG_URL_ENV, ICEBERG_WAREHOUSE_ENV
from resources.sql import sql_literal
from tests.pipeline.sync_support import query, sync
from tests.pipeline.webhook_stack import Stack, new_kol, new_signal, stack  # noqa: F401 (fixture)
from tests.postgres import PostgresServer
from tests.s3 import S3Server
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TABLES = [name for spec in ICEBERG_TABLES for name in (spec.table, *(c.name for c in spec.children))]


@pytest.fixture
def iceberg_env(postgres: PostgresServer, s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A catalog database and a bucket of this test's own, set in the environment as a deployment sets them."""
    env = s3.env() | {
        ICEBERG_CATALOG_URL_ENV: postgres.create_database(f"iceberg_{uuid.uuid4().hex[:8]}"),
        ICEBERG_WAREHOUSE_ENV: f"s3://{s3.create_bucket('tables')}/commops/tables",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env


def read_back(env: dict[str, str], out: Path, tables: list[str]) -> Path:
    """The Iceberg tables copied into the DuckDB file `out` by another process (pyiceberg -> Arrow -> DuckDB)."""
    out.unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "-m", "tests.pipeline.iceberg_reader", str(out), *tables],
        cwd=REPO, env=os.environ | env, check=True, timeout=120,
    )
    return out


# The stamps of the version a row of an Iceberg table holds: they move in analytics.duckdb each night a row is
# seen again, in Iceberg only when its content changes (docs/analysts.md).
STAMPS = ("_snapshot_date", "_loaded_at", "_fetched_at")


def differences(analytics: Path, from_iceberg: Path, tables: list[str], *, stamps: bool = True) -> dict[str, tuple[int, int, int]]:
    """Per table: (rows in analytics.duckdb, rows only there, rows only in the Iceberg copy), rows compared
    on every column (JSON compared as its text, the digest as a number: the types Iceberg has), or without
    `stamps` on every column but STAMPS."""
    conn = duckdb.connect()
    conn.execute(f"ATTACH {sql_literal(str(analytics))} AS a (READ_ONLY)")
    conn.execute(f"ATTACH {sql_literal(str(from_iceberg))} AS i (READ_ONLY)")
    found = {}
    for table in tables:
        columns = conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
            "ORDER BY column_index", [table],
        ).fetchall()
        select = ", ".join(f'"{c}"::{ICEBERG_CASTS[t]}' if t in ICEBERG_CASTS else f'"{c}"' for c, t in columns
                           if stamps or c not in STAMPS)
        a, i = f"SELECT {select} FROM a.{table}", f"SELECT {select} FROM i.{table}"
        found[table] = (
            conn.execute(f"SELECT count(*) FROM a.{table}").fetchone()[0],
            conn.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {i})").fetchone()[0],
            conn.execute(f"SELECT count(*) FROM ({i} EXCEPT ALL {a})").fetchone()[0],
        )
    conn.close()
    return found


def assert_equal_table_by_table(stack: Stack, env: dict[str, str], tmp_path: Path) -> dict[str, tuple[int, int, int]]:
    tables = [t for t in TABLES if query(stack.analytics, f"SELECT count(*) FROM duckdb_tables() WHERE table_name = '{t}'") == [(1,)]]
    found = differences(stack.analytics, read_back(env, tmp_path / "from_iceberg.duckdb", tables), tables, stamps=False)
    assert {t: d[1:] for t, d in found.items()} == {t: (0, 0) for t in tables}
    return found


def test_iceberg_tables_equal_analytics_table_by_table_after_a_nightly_sync_and_after_webhook_updates(
    iceberg_env, stack: Stack, tmp_path: Path
) -> None:
    from service.store import campaigns, kols

    a = stack.change(lambda conn, org: new_kol(conn, org, "Ana Lopez"))
    b = stack.change(lambda conn, org: new_kol(conn, org, "Ben Okafor"))
    stack.change(new_signal)
    sync(stack.service, stack.data_dir)

    after_sync = assert_equal_table_by_table(stack, iceberg_env, tmp_path)
    assert {t: after_sync[t][0] for t in ("kols", "products", "signals")} == {"kols": 2, "products": 3, "signals": 1}
    assert after_sync["product_market_status"][0] > 0  # child tables too

    stack.change(lambda conn, org: kols.update_kol(conn, org, a["id"], {"title": "Chief of Cardiology"}))
    stack.change(lambda conn, org: kols.archive_kol(conn, org, b["id"]))
    stack.change(lambda conn, org: campaigns.create_campaign(conn, org, {
        "name": "Launch", "type": "product_update", "audience": {"kol_ids": [a["id"]]},
        "email": {"subject": "News", "body_html": "<p>Hi</p>", "from_name": "Team"}, "schedule": {"type": "immediate"},
    }))
    # Before the sync: kol.created x2, signal.new and signal.high_impact (4, not 3: waiting for 6 events could
    # apply them before campaign.created had arrived). Wait for the three events this part is about, by name.
    wait_until(lambda: {"kol.updated", "kol.archived", "campaign.created"} <= {e.event for e in stack.inbox.pending()},
               timeout=20.0)
    run = stack.apply_pending()

    after_events = assert_equal_table_by_table(stack, iceberg_env, tmp_path)
    assert after_events["webhook_events"][0] >= 6 and after_events["campaigns"][0] == 1
    copy = tmp_path / "from_iceberg.duckdb"
    assert query(copy, f"SELECT title FROM kols WHERE id = '{a['id']}'") == [("Chief of Cardiology",)]
    assert query(copy, f"SELECT is_archived FROM kols WHERE id = '{b['id']}'") == [(True,)]
    published = run.asset_materializations_for_node("analytics")[0].metadata
    assert published["iceberg_rows_written_kols"].value == 2  # the two KOLs the events changed, not every row


def test_a_publish_from_an_older_warehouse_never_replaces_a_newer_row(iceberg_env, make_service, tmp_path: Path) -> None:
    from service.store import db, kols

    service = make_service(kols=5, products=2)
    older = sync(service, tmp_path / "older")  # a machine whose warehouse has the KOLs as they were
    target = query(older.analytics_path, "SELECT id FROM kols ORDER BY id LIMIT 1")[0][0]
    conn = service.connect()
    with db.transaction(conn):
        kols.update_kol(conn, service.org_id, target, {"title": "Head of Research"})
    conn.close()
    newer = sync(service, tmp_path / "newer")  # another machine, later: the newer version of one KOL

    resource = IcebergResource(catalog_url=iceberg_env[ICEBERG_CATALOG_URL_ENV],
                               warehouse=iceberg_env[ICEBERG_WAREHOUSE_ENV])
    again = {p.table: p.rows_written for p in resource.publish(older.analytics_path, ICEBERG_TABLES)}
    assert again["kols"] == 0  # the older warehouse's KOLs: all older or the same as the tables hold

    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", ["kols"])
    assert query(copy, f"SELECT title FROM kols WHERE id = '{target}'") == [("Head of Research",)]
    assert differences(newer.analytics_path, copy, ["kols"], stamps=False)["kols"] == (5, 0, 0)


def test_a_second_night_writes_only_the_changed_rows_and_readers_see_the_current_state(
    iceberg_env, make_service, tmp_path: Path
) -> None:
    from service.store import db, kols

    service = make_service(kols=20, products=2)
    data_dir = tmp_path / "data"
    sync(service, data_dir)
    night_1 = query(data_dir / "analytics.duckdb", "SELECT id, _fetched_at FROM kols ORDER BY id")

    def change(ids: list[str], title: str):
        with service.connect() as conn, db.transaction(conn):
            for kol_id in ids:
                kols.update_kol(conn, service.org_id, kol_id, {"title": title})
        return sync(service, data_dir).asset("analytics").metadata

    changed = [night_1[3][0], night_1[11][0]]
    published = change(changed, "Head of Research")

    assert (published["iceberg_rows_written_kols"], published["iceberg_deletes_written_kols"]) == (2, 2)
    assert published["iceberg_rows_written_products"] == published["iceberg_rows_written_product_market_status"] == 0
    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", ["kols"])
    assert differences(data_dir / "analytics.duckdb", copy, ["kols"], stamps=False)["kols"] == (20, 0, 0)
    assert query(copy, "SELECT count(*), count(DISTINCT id) FROM kols") == [(20, 20)]
    # The stamps of the version written: night 2's for the changed rows, night 1's for the others.
    fetched = dict(query(data_dir / "analytics.duckdb", "SELECT id, _fetched_at FROM kols"))
    assert query(copy, "SELECT id, _fetched_at FROM kols ORDER BY id") == [
        (kol_id, fetched[kol_id] if kol_id in changed else at) for kol_id, at in night_1
    ]
    kols_table = open_catalog(iceberg_env[ICEBERG_CATALOG_URL_ENV], iceberg_env[ICEBERG_WAREHOUSE_ENV]).load_table("commops.kols")
    assert sum(d.record_count for t in kols_table.scan().plan_files() for d in t.delete_files) == 2

    # 2 + 4 deleted rows of the 22 in the data files: more than COMPACT_SHARE, the table is rewritten whole.
    published = change([kol_id for kol_id, _ in night_1[5:9]], "Fellow")
    assert (published["iceberg_rows_written_kols"], published["iceberg_deletes_written_kols"]) == (20, 0)
    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", ["kols"])
    assert differences(data_dir / "analytics.duckdb", copy, ["kols"], stamps=False)["kols"] == (20, 0, 0)
    kols_table = kols_table.refresh()
    assert not any(t.delete_files for t in kols_table.scan().plan_files())
    assert kols_table.current_snapshot().summary["total-records"] == "20"


def test_one_iceberg_setting_without_the_other_or_an_unreachable_catalog_is_one_line_naming_the_variable() -> None:
    from resources.iceberg import open_catalog
    from resources.settings import SettingsError
    from tests.service.webhook_support import free_port

    with pytest.raises(SettingsError, match=f"^{ICEBERG_CATALOG_URL_ENV} is not set: .* both"):
        open_catalog(None, "s3://bucket/tables")
    with pytest.raises(SettingsError, match=f"^{ICEBERG_WAREHOUSE_ENV}='file:///tmp' is not an s3://bucket/prefix URL"):
        open_catalog("postgresql://u:secret@127.0.0.1/db", "file:///tmp")
    with pytest.raises(SettingsError, match=f"^{ICEBERG_CATALOG_URL_ENV}=postgresql\\+psycopg2://u:\\*\\*\\*@.*catalog unreachable") as error:
        open_catalog(f"postgresql://u:secret@127.0.0.1:{free_port()}/db", "s3://bucket/tables")
    assert "secret" not in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(SettingsError, match=f"^{ICEBERG_CATALOG_URL_ENV} is not a database URL") as error:
        open_catalog("postgresql://u:secret@127.0.0.1:port/db", "s3://bucket/tables")  # a port that is not a number
    assert "secret" not in str(error.value)


@dataclass(frozen=True)
class _Kols:
    """The shape of a current-state table the publish needs (resources.warehouse.TableSpec)."""

    table: str = "kols"
    key: str = "id"
    version: tuple[str, ...] = ("updated_at",)
    observed: tuple[str, ...] = ()  # no receipt times in this table
    children: tuple = ()


def _host_analytics(path: Path, rows: list[tuple[str, int, str]]) -> Path:
    """An analytics.duckdb of one host: KOLs (id, day of November their version is from, title)."""
    path.parent.mkdir(parents=True)
    conn = duckdb.connect(str(path))
    values = ", ".join(f"('{id_}', {day}, '{title}')" for id_, day, title in rows)
    conn.execute(
        "CREATE TABLE kols AS SELECT 'default' AS org, id, TIMESTAMPTZ '2026-11-01 00:00:00+00' + INTERVAL (day) DAY "
        "AS updated_at, title, DATE '2026-11-10' AS _snapshot_date, now() AS _loaded_at, hash(id, title) AS _digest "
        f"FROM (VALUES {values}) t(id, day, title)"
    )
    conn.close()
    return path


def test_two_hosts_publishing_at_once_both_land_and_the_newer_row_wins(iceberg_env, tmp_path: Path, monkeypatch) -> None:
    import resources.iceberg as iceberg

    same = [(f"kol_s{i}", 1, "Same") for i in range(8)]  # one replaced row of 11: a position delete, no rewrite
    host_a = _host_analytics(tmp_path / "a" / "analytics.duckdb", [("kol_1", 1, "A older"), ("kol_2", 3, "A newer"), *same])
    host_b = _host_analytics(tmp_path / "b" / "analytics.duckdb",
                             [("kol_1", 2, "B newer"), ("kol_2", 2, "B older"), ("kol_3", 1, "B only"), *same])
    settings = {"catalog_url": iceberg_env[ICEBERG_CATALOG_URL_ENV], "warehouse": iceberg_env[ICEBERG_WAREHOUSE_ENV]}
    winners, host_b_published = iceberg._winners, []

    def host_b_commits_meanwhile(conn, table, spec):
        found = winners(conn, table, spec)
        monkeypatch.setattr(iceberg, "_winners", winners)  # once: host A has read the table, host B commits first
        host_b_published.extend(IcebergResource(**settings).publish(host_b, [_Kols()]))
        return found

    monkeypatch.setattr(iceberg, "_winners", host_b_commits_meanwhile)
    (published,) = IcebergResource(**settings).publish(host_a, [_Kols()])

    assert host_b_published[0].rows_written == 11
    # recomputed: only kol_2 is newer on host A (written, its older row deleted by position)
    assert (published.attempts, published.rows_written, published.deletes_written) == (2, 1, 1)
    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", ["kols"])
    assert query(copy, "SELECT id, title FROM kols WHERE title <> 'Same' ORDER BY id") == [
        ("kol_1", "B newer"), ("kol_2", "A newer"), ("kol_3", "B only")
    ]
    assert query(copy, "SELECT count(*), count(DISTINCT id) FROM kols") == [(11, 11)]
