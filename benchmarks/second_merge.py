"""Benchmark: what the warehouse merge of a second nightly run costs against the first night's.

    .venv/bin/python benchmarks/second_merge.py [--kols 100000] [--changed 0.01] [--runs 3] [--seed-cache DIR]

Seeds the service, runs one full sync (`run_sync`, KOL details off) into a fresh data directory, then
per table, on fresh copies, alternating, `--runs` times:

  first night    WarehouseSession.merge of that day's snapshot into an empty table (every row written)
  second night   WarehouseSession.merge of the same snapshot a day later with `--changed` of its rows
                 changed, read from Parquet as the lake holds it (a newer `updated_at` where it is the version,
                 another value, the row's digest hashed again), written by the lake's writer given the first
                 night's snapshot, so with its side file of the rows changed (resources/changed_rows.py),
                 merged as the table step merges it: the write path compares ids, versions and digests,
                 leaves unchanged rows in place (moving only their _snapshot_date and receipt times) and
                 reads whole only the rows it writes, from the side file
  old path       the write path before (every incoming row not older is deleted and inserted again,
                 its digest computed from the row, not read), on the same copy, as the reference: the
                 second night must leave the same table (every column but _loaded_at and _fetched_at,
                 which an unchanged row keeps)

Prints medians per table and the ratio second / first (aim <= 0.3), and what the side file costs the snapshot
step: writing the second night's file with the comparison against writing it without (medians of `--runs`).
Last line: the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.nightly_sync import CONCURRENCY, SYNC, _child, seed_service, serving  # noqa: E402

ORG = "default"
SECOND_DAY = "2099-01-01"


def changed_source(snapshot: str, spec, fraction: float, folder: Path, previous: Path | None = None) -> tuple[str, str | None, float]:
    """The snapshot as a second night would bring it, written by the lake's own writer (resources/lake.py
    StagedSnapshot: its encodings, row groups and digests): fetched a day later, and `fraction` of its rows
    changed (a value, and `updated_at` one second on where it is the version), into `folder` as the lake
    publishes it: given the `previous` snapshot file, with the side file of the rows changed beside it
    (resources/changed_rows.py). Made by a connection of its own,
    outside the warehouse's memory limit. Returns the file's and the side file's table expressions, and the
    seconds the writer took (the snapshot step's share: its batches' hashing, writing and comparing)."""
    import duckdb

    from resources.changed_rows import changes_of
    from resources.digest import DIGEST_COLUMN, content_fields
    from resources.lake import ROWS_PER_ROW_GROUP, StagedSnapshot
    from resources.sql import read_parquet

    value = next(f.name for f in spec.schema if f.name != spec.key and str(f.type) == "string")
    changed = f"hash({spec.key}) % {round(1 / fraction)} = 0"
    replace = ["_fetched_at + INTERVAL 1 DAY AS _fetched_at",
               f"CASE WHEN {changed} THEN coalesce(\"{value}\", '') || ' (changed)' ELSE \"{value}\" END AS \"{value}\""]
    if "updated_at" in spec.version:
        replace.append(f"CASE WHEN {changed} THEN updated_at + INTERVAL 1 SECOND ELSE updated_at END AS updated_at")
    shutil.rmtree(folder, ignore_errors=True)
    staging = folder.with_suffix(".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    writing = 0.0
    with duckdb.connect() as conn:
        rows = conn.sql(f"SELECT * EXCLUDE ({DIGEST_COLUMN}) REPLACE ({', '.join(replace)}) FROM {snapshot}")
        started = time.perf_counter()
        staged = StagedSnapshot(staging, spec.schema, key=spec.key, newest_by=spec.key,
                                digest=content_fields(spec.schema, spec.observed), previous=previous, sort=spec.sort)
        writing += time.perf_counter() - started
        for batch in rows.to_arrow_reader(ROWS_PER_ROW_GROUP):
            batch = batch.cast(spec.schema)
            started = time.perf_counter()
            staged.write(batch)
            writing += time.perf_counter() - started
        started = time.perf_counter()
        staged.finish()
        staged.close()
        writing += time.perf_counter() - started
    staging.rename(folder)  # the snapshot and its side file below it, as the lake publishes them
    snapshot_path = folder / staged.path.name
    changes = changes_of(snapshot_path)
    return read_parquet(snapshot_path), None if changes is None else read_parquet(changes), writing


def old_path(session, spec, source: str) -> None:
    """The write path before unchanged rows were left in place: every incoming row not older than the table's deleted and inserted
    again, children rebuilt for all of them."""
    from resources.warehouse import _not_older, row_digest

    conn = session.conn
    conn.execute("BEGIN TRANSACTION")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _in AS SELECT '{ORG}' AS org, * EXCLUDE (_digest), DATE '{SECOND_DAY}' "
                 f"AS _snapshot_date, now() AS _loaded_at, {row_digest(spec)} AS _digest FROM {source}")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _merged_ids AS SELECT i.{spec.key} AS id FROM _in i "
                 f"LEFT JOIN {spec.table} t ON t.{spec.key} = i.{spec.key} "
                 f"WHERE t.{spec.key} IS NULL OR {_not_older(spec.version, 'i', 't')}")
    conn.execute(f"DELETE FROM {spec.table} WHERE {spec.key} IN (SELECT id FROM _merged_ids)")
    conn.execute(f"INSERT INTO {spec.table} BY NAME SELECT * FROM _in WHERE {spec.key} IN (SELECT id FROM _merged_ids)")
    for child in spec.children:
        session._rebuild_child(spec.table, child, ORG)
    conn.execute("COMMIT")


def snapshot_file(data: Path, spec) -> Path:
    [path] = (data / "lake" / f"org={ORG}" / spec.name).glob("snapshot_date=*/data.parquet")
    return path


def snapshot_of(data: Path, spec) -> str:
    from resources.sql import read_parquet

    return read_parquet(snapshot_file(data, spec))


def first_night(data: Path, copy: Path, spec) -> float:
    """Seconds to merge (and checkpoint) the first night's snapshot into an empty table."""
    from resources.warehouse import WarehouseResource

    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    os.sync()  # as before the second night: no earlier copy's writeback inside the timing
    with WarehouseResource(data_dir=str(copy)).writer() as session:
        session.ensure_table(spec)
        started = time.perf_counter()
        session.merge(spec, snapshot_of(data, spec), org=ORG, snapshot_date="2026-01-01")
        session.conn.execute("CHECKPOINT")
        return time.perf_counter() - started


def second_night(data: Path, copy: Path, spec, source: str, reference: bool, changed: str | None = None) -> tuple[float, Path]:
    """Seconds to merge (and checkpoint) the second night's rows into a fresh copy of the first night's warehouse."""
    from resources.warehouse import WarehouseResource

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data, copy)
    # The copy's dirty pages written out first: the merge's CHECKPOINT fsyncs, and would otherwise wait for
    # the writeback of a copy no real night makes (0.19 s against 0.002 s for one product changed at 1M).
    os.sync()
    # The old path (the reference) holds every incoming row in a temp table: give it room at 1M.
    with WarehouseResource(data_dir=str(copy), **({"memory_limit": "2GB"} if reference else {})).writer() as session:
        started = time.perf_counter()
        if reference:
            old_path(session, spec, source)
        else:
            session.merge(spec, source, org=ORG, snapshot_date=SECOND_DAY, changed_relation=changed)
        session.conn.execute("CHECKPOINT")
        seconds = time.perf_counter() - started
    return seconds, copy / "warehouse.duckdb"


def same_tables(a: Path, b: Path, spec) -> bool:
    import duckdb

    conn = duckdb.connect()
    conn.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    conn.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    differ = 0
    for table in [spec.table, *(c.name for c in spec.children)]:
        columns = ", ".join(f'"{name}"' for name, in conn.execute(
            f"SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = '{table}' "
            "AND column_name NOT IN ('_loaded_at', '_fetched_at')").fetchall())
        differ += conn.execute(
            f"SELECT count(*) FROM ((SELECT {columns} FROM a.{table} EXCEPT ALL SELECT {columns} FROM b.{table}) "
            f"UNION ALL (SELECT {columns} FROM b.{table} EXCEPT ALL SELECT {columns} FROM a.{table}))").fetchone()[0]
    conn.close()
    return differ == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of each table's rows changed")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed-cache", type=Path, help="keep the seeded service here per scale, and reuse it")
    args = parser.parse_args()

    from sync.catalog import CATALOG

    figures = {}
    with tempfile.TemporaryDirectory(prefix="commops-merge-bench-") as tmp:
        tmp_path = Path(tmp)
        db_path, key = seed_service(tmp_path, args.kols / 100_000, args.seed_cache)
        with serving(db_path) as base_url:
            _child(SYNC, base_url, key, str(tmp_path / "data"), "0", str(CONCURRENCY))
        data = tmp_path / "data"
        for spec in CATALOG:
            first, second, equal, plain, compared = [], [], True, [], []
            for _ in range(args.runs):  # the snapshot step's writer, without the comparison and with it
                plain.append(changed_source(snapshot_of(data, spec), spec, args.changed, tmp_path / f"plain-{spec.name}")[2])
                source, changed, seconds = changed_source(snapshot_of(data, spec), spec, args.changed,
                                                          tmp_path / f"second-{spec.name}", snapshot_file(data, spec))
                compared.append(seconds)
            for _ in range(args.runs):  # alternating, each on a fresh copy
                first.append(first_night(data, tmp_path / "first", spec))
                seconds, ours = second_night(data, tmp_path / "second", spec, source, reference=False, changed=changed)
                second.append(seconds)
                _, theirs = second_night(data, tmp_path / "reference", spec, source, reference=True)
                equal = equal and same_tables(ours, theirs, spec)
            figures[spec.table] = {"first_seconds": statistics.median(first),
                                   "second_seconds": statistics.median(second), "same_table": equal,
                                   "side_file": changed is not None,
                                   "write_seconds": statistics.median(plain), "write_compared_seconds": statistics.median(compared)}
            f = figures[spec.table]
            print(f"{spec.table:10} first night {f['first_seconds']:.3f} s, second night {f['second_seconds']:.3f} s "
                  f"(ratio {f['second_seconds'] / f['first_seconds']:.2f}), same table as the old path: "
                  f"{'yes' if equal else 'NO'}; side file: {'yes' if changed else 'none'}, snapshot write "
                  f"{f['write_seconds']:.3f} s, with the comparison {f['write_compared_seconds']:.3f} s", flush=True)
    total = {k: sum(f[k] for f in figures.values())
             for k in ("first_seconds", "second_seconds", "write_seconds", "write_compared_seconds")}
    ratio = total["second_seconds"] / total["first_seconds"]
    print(f"all tables, medians of {args.runs}: first night {total['first_seconds']:.2f} s, second night "
          f"{total['second_seconds']:.2f} s, ratio {ratio:.2f} (aim <= 0.3), {args.changed:.0%} of rows changed")
    print(f"the side file's comparison in the snapshot step: {total['write_compared_seconds'] - total['write_seconds']:+.2f} s "
          f"(snapshot writes {total['write_seconds']:.2f} s without it, {total['write_compared_seconds']:.2f} s with it)")
    print(json.dumps({"kols": args.kols, "changed": args.changed, "tables": figures, **total, "ratio": ratio}))


if __name__ == "__main__":
    main()
