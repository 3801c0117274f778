"""Benchmark: what the warehouse merge of a second nightly run costs, beside a merge that leaves unchanged rows in place.

    .venv/bin/python benchmarks/second_merge.py [--kols 100000] [--changed 0.01] [--runs 3]

Seeds the service, runs one full sync (`run_sync`, KOL details off) into a fresh data directory,
then, per table, merges that day's snapshot again with 1% of its rows changed (a newer `updated_at`
and another value), as a second night would, two ways, each on its own copy of the warehouse:

  current    WarehouseSession.merge, the one write path: every incoming row that is not older is
             deleted and inserted again, so every row is rewritten
  in place   a prototype (this file only, not the pipeline's): rows whose content is unchanged (an
             md5 of the JSON of every column but the load columns, compared on both sides) get only
             their load columns (_fetched_at, _snapshot_date, _loaded_at) updated; the rest are
             merged as now

and checks that both leave the same table (every column but `_loaded_at`). Prints the medians per
table and their ratio. Last line: the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.nightly_sync import CONCURRENCY, SYNC, _child, seed_service, serving  # noqa: E402

LOAD = ("_fetched_at", "_snapshot_date", "_loaded_at")


def changed_source(conn, snapshot: str, spec, fraction: float) -> str:
    """The snapshot as a second night would bring it, as a temp table: fetched a day later, and
    `fraction` of its rows changed (a value, and `updated_at` one second on where it is the version)."""
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _incoming AS SELECT * REPLACE (_fetched_at + INTERVAL 1 DAY AS "
                 f"_fetched_at), DATE '2099-01-01' AS _snapshot_date, now() AS _loaded_at FROM {snapshot}")
    value = next(f.name for f in spec.schema if f.name not in (spec.key, *LOAD) and str(f.type) == "string")
    newer = ", updated_at = updated_at + INTERVAL 1 SECOND" if "updated_at" in spec.version else ""
    conn.execute(f"UPDATE _incoming SET \"{value}\" = coalesce(\"{value}\", '') || ' (changed)'{newer} "
                 f"WHERE hash({spec.key}) % {round(1 / fraction)} = 0")
    return "_incoming"


def merge_in_place(session, spec, source: str) -> None:
    """The prototype: unchanged rows keep their place, only their load columns move."""
    from resources.warehouse import _not_older

    conn, key = session.conn, spec.key
    content = [name for name, in conn.execute(f"SELECT column_name FROM (DESCRIBE {source})").fetchall()
               if name not in LOAD]
    digest = "md5(to_json(struct_pack(" + ", ".join(f'"{c}" := {{a}}."{c}"' for c in content) + ")))"
    conn.execute("BEGIN TRANSACTION")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _theirs AS SELECT t.{key} AS id, {digest.format(a='t')} AS d "
                 f"FROM {spec.table} t")
    conn.execute(
        f"CREATE OR REPLACE TEMP TABLE _merged AS SELECT i.{key} AS id, "
        f"(o.d IS NOT NULL AND o.d = {digest.format(a='i')}) AS same FROM {source} i "
        f"LEFT JOIN {spec.table} t ON t.{key} = i.{key} LEFT JOIN _theirs o ON o.id = i.{key} "
        f"WHERE t.{key} IS NULL OR {_not_older(spec.version, 'i', 't')}")
    sets = ", ".join(f'"{c}" = i."{c}"' for c in LOAD)
    conn.execute(f"UPDATE {spec.table} SET {sets} FROM {source} i WHERE {spec.table}.{key} = i.{key} "
                 f"AND i.{key} IN (SELECT id FROM _merged WHERE same)")
    conn.execute("CREATE OR REPLACE TEMP TABLE _merged_ids AS SELECT id FROM _merged WHERE NOT same")
    conn.execute(f"DELETE FROM {spec.table} WHERE {key} IN (SELECT id FROM _merged_ids)")
    conn.execute(f"INSERT INTO {spec.table} BY NAME SELECT i.* FROM {source} i "
                 f"WHERE i.{key} IN (SELECT id FROM _merged_ids)")
    for child in spec.children:
        session._rebuild_child(child)
    conn.execute("COMMIT")


def timed_merge(data_dir: Path, copy: Path, spec, fraction: float, in_place: bool) -> tuple[float, Path]:
    """Seconds to merge (and checkpoint) the second night's rows into a fresh copy of the first night's warehouse."""
    from resources.sql import read_parquet
    from resources.warehouse import WarehouseResource

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data_dir, copy)
    [snapshot_file] = (copy / "lake" / spec.name).glob("snapshot_date=*/data.parquet")
    with WarehouseResource(data_dir=str(copy)).writer() as session:
        source = changed_source(session.conn, read_parquet(snapshot_file), spec, fraction)
        started = time.perf_counter()
        if in_place:
            merge_in_place(session, spec, source)
        else:
            session.merge(spec, source)
        session.conn.execute("CHECKPOINT")
        seconds = time.perf_counter() - started
    return seconds, copy / "warehouse.duckdb"


def same_tables(a: Path, b: Path, table: str) -> bool:
    import duckdb

    conn = duckdb.connect()
    conn.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    conn.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    columns = ", ".join(f'"{name}"' for name, in conn.execute(
        f"SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = '{table}' "
        "AND column_name <> '_loaded_at'").fetchall())
    differ = conn.execute(f"SELECT count(*) FROM ((SELECT {columns} FROM a.{table} EXCEPT ALL SELECT {columns} FROM "
                          f"b.{table}) UNION ALL (SELECT {columns} FROM b.{table} EXCEPT ALL SELECT {columns} FROM "
                          f"a.{table}))").fetchone()[0]
    conn.close()
    return differ == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of each table's rows changed")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from assets.catalog import CATALOG

    figures = {}
    with tempfile.TemporaryDirectory(prefix="commops-merge-bench-") as tmp:
        tmp_path = Path(tmp)
        db_path, key = seed_service(tmp_path, args.kols / 100_000)
        with serving(db_path) as base_url:
            _child(SYNC, base_url, key, str(tmp_path / "data"), "0", str(CONCURRENCY))
        for spec in CATALOG:
            current, in_place, equal = [], [], True
            for _ in range(args.runs):  # alternating, each on a fresh copy of the first night's warehouse
                seconds, a = timed_merge(tmp_path / "data", tmp_path / "current", spec, args.changed, False)
                current.append(seconds)
                seconds, b = timed_merge(tmp_path / "data", tmp_path / "in-place", spec, args.changed, True)
                in_place.append(seconds)
                equal = equal and same_tables(a, b, spec.table)
            figures[spec.table] = {"current_seconds": statistics.median(current),
                                   "in_place_seconds": statistics.median(in_place), "same_table": equal}
            f = figures[spec.table]
            print(f"{spec.table:10} current {f['current_seconds']:.2f} s, in place {f['in_place_seconds']:.2f} s "
                  f"(ratio {f['in_place_seconds'] / f['current_seconds']:.2f}), same table: {'yes' if equal else 'NO'}",
                  flush=True)
    total = {k: sum(f[k] for f in figures.values()) for k in ("current_seconds", "in_place_seconds")}
    print(f"all tables, medians of {args.runs}: current {total['current_seconds']:.2f} s, "
          f"in place {total['in_place_seconds']:.2f} s, {args.changed:.0%} of rows changed")
    print(json.dumps({"kols": args.kols, "changed": args.changed, "tables": figures, **total}))


if __name__ == "__main__":
    main()
