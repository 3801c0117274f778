"""Benchmark: the open table format beside analytics.duckdb, pyiceberg against DuckLake.

    .venv/bin/python benchmarks/table_format.py [--rows 100000] [--upsert 1000] [--runs 3]
        [--ducklake-python /path/to/venv-with-duckdb-1.5.5/bin/python] [--write]

A real Postgres (the catalog) and a real S3 API server (moto, the data) on 127.0.0.1, as tests/ start them.
The data: a current-state KOL table of --rows rows with the warehouse's columns (analytics.duckdb as a
sync leaves it), and an upsert of --upsert rows, nine in ten newer than the table's (new title, later
updated_at), one in ten older (must not win). Per engine, --runs times, each run into a fresh table:

  publish   the whole table into an empty table
  upsert    the upsert rows merged, newer row wins per (org, id); the rows that won are counted and checked
  reader    another process: open the catalog, read the table, `SELECT tier, count(*), count(updated titles)
            GROUP BY tier`: the time inside it (after its imports: catalog, extensions loaded for DuckLake, to
            the result) and its whole wall time (interpreter start and imports included)

pyiceberg runs our publish path (resources/iceberg.py: SQL catalog, pyarrow's S3 filesystem), its reader
hands Arrow to this project's DuckDB 2.0. DuckLake needs its DuckDB extensions (ducklake, postgres_scanner,
httpfs), which DuckDB downloads at run time (not possible here) or which PyPI's duckdb-extension-* wheels
carry for DuckDB 1.5.5 only: it runs in --ducklake-python, a separate venv with duckdb==1.5.5 and those
wheels (`python3 -m venv V && V/bin/pip install duckdb==1.5.5 duckdb-extension-ducklake==1.5.5
duckdb-extension-postgres-scanner==1.5.5 duckdb-extension-httpfs==1.5.5`); without it only pyiceberg is
measured. Either way the script first checks whether this project's DuckDB 2.0 loads the ducklake wheel.

Prints medians per engine and operation; last line: the figures as JSON. --write also writes the section
docs/benchmarks-table-format.md (included in docs/benchmarks.md by `python -m benchmarks`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from resources.iceberg import IcebergResource  # noqa: E402
from tests.postgres import running_postgres  # noqa: E402
from tests.s3 import running_s3  # noqa: E402

DOCS = ROOT / "docs"
QUERY = "SELECT tier, count(*) AS kols, count(*) FILTER (WHERE title LIKE 'Updated%') AS updated FROM kols GROUP BY tier ORDER BY tier"


@dataclass(frozen=True)
class KolTable:
    """What the publish path needs of the table (resources.warehouse.TableSpec)."""

    table: str = "kols"
    key: str = "id"
    version: tuple[str, ...] = ("updated_at", "_fetched_at")
    children: tuple = ()


def build_data(directory: Path, rows: int, upsert: int) -> dict[str, Path]:
    """analytics.duckdb before and after the upsert, and the table and the upsert rows as Parquet (DuckLake's input)."""
    before, after = directory / "before" / "analytics.duckdb", directory / "after" / "analytics.duckdb"
    before.parent.mkdir()
    after.parent.mkdir()
    conn = duckdb.connect(str(before))
    conn.execute(f"""
        CREATE TABLE kols AS SELECT 'default' AS org, printf('kol_%08d', i) AS id,
            'Dr. Name ' || i AS full_name, ['Professor', 'Fellow', 'Consultant'][i % 3 + 1] AS title,
            'Institution ' || (i % 997) AS institution, ['cardiology', 'oncology'][:(i % 2 + 1)] AS specialties,
            ['tag' || (i % 11)] AS tags, ['tier_1', 'tier_2', 'tier_3'][i % 3 + 1] AS tier,
            ['low', 'medium', 'high'][i % 3 + 1] AS engagement_level, 'kol' || i || '@example.org' AS email,
            {{'city': 'City ' || (i % 101), 'country': 'DE'}} AS location, i % 17 = 0 AS is_archived,
            TIMESTAMPTZ '2026-01-01 00:00:00+00' + INTERVAL (i) SECOND AS created_at,
            TIMESTAMPTZ '2026-06-01 00:00:00+00' + INTERVAL (i) SECOND AS updated_at,
            ('{{"custom_score": ' || (i % 100) || '}}')::JSON AS _extra,
            TIMESTAMPTZ '2026-11-01 02:00:00+00' AS _fetched_at, DATE '2026-11-01' AS _snapshot_date,
            TIMESTAMPTZ '2026-11-01 02:10:00+00' AS _loaded_at, hash(i) AS _digest
        FROM range({rows}) t(i)
    """)
    step = max(rows // upsert, 1)
    # Nine in ten newer (a day later, a new title), one in ten older (a day earlier): those must lose.
    conn.execute(f"""
        CREATE TABLE upsert AS SELECT * REPLACE (
            'Updated ' || title AS title,
            updated_at + CASE WHEN n % 10 = 9 THEN -INTERVAL 1 DAY ELSE INTERVAL 1 DAY END AS updated_at,
            TIMESTAMPTZ '2026-11-02 02:00:00+00' AS _fetched_at, DATE '2026-11-02' AS _snapshot_date,
            TIMESTAMPTZ '2026-11-02 02:10:00+00' AS _loaded_at, hash(id, 'updated') AS _digest)
        FROM (SELECT *, row_number() OVER (ORDER BY id) - 1 AS n FROM kols WHERE (id[5:]::INT) % {step} = 0 LIMIT {upsert})
    """)
    conn.execute("ALTER TABLE upsert DROP COLUMN n")
    table, rows_upsert = directory / "kols.parquet", directory / "upsert.parquet"
    conn.execute(f"COPY kols TO '{table}' (FORMAT parquet)")
    conn.execute(f"COPY upsert TO '{rows_upsert}' (FORMAT parquet)")
    conn.execute(f"ATTACH '{after}' AS after")
    # As the warehouse merges it: the newer version wins, the older one leaves the row as it was.
    conn.execute("""
        CREATE TABLE after.kols AS SELECT k.* FROM kols k LEFT JOIN upsert u USING (org, id)
        WHERE u.id IS NULL OR u.updated_at <= k.updated_at
        UNION ALL SELECT u.* FROM upsert u JOIN kols k USING (org, id) WHERE u.updated_at > k.updated_at
    """)
    conn.close()
    return {"before": before, "after": after, "table": table, "upsert": rows_upsert}


def expected_updated(data: dict[str, Path]) -> int:
    conn = duckdb.connect(str(data["after"]), read_only=True)
    try:
        return conn.execute("SELECT count(*) FROM kols WHERE title LIKE 'Updated%'").fetchone()[0]
    finally:
        conn.close()


ICEBERG_READER = textwrap.dedent("""
    import json, sys, time
    import duckdb
    from pyiceberg.catalog import load_catalog
    started = time.perf_counter()
    properties, identifier, query = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    kols = load_catalog("commops", **properties).load_table(identifier).scan().to_arrow()
    rows = duckdb.connect().execute(query).fetchall()
    print(json.dumps({"seconds": time.perf_counter() - started, "rows": rows}))
""")


def pyiceberg_run(run: int, data: dict[str, Path], catalog_url: str, warehouse: str) -> dict[str, float]:
    namespace = f"bench_{run}_{os.getpid()}"
    resource = IcebergResource(catalog_url=catalog_url, warehouse=warehouse, namespace=namespace)
    spec = KolTable()
    started = time.perf_counter()
    (published,) = resource.publish(data["before"], [spec])
    publish = time.perf_counter() - started
    started = time.perf_counter()
    (upserted,) = resource.publish(data["after"], [spec])
    upsert = time.perf_counter() - started
    properties = {"type": "sql", "uri": catalog_url, "warehouse": warehouse, "s3.endpoint": os.environ["AWS_ENDPOINT_URL"],
                  "s3.region": os.environ["AWS_REGION"], "s3.request-timeout": "60"}
    reader, wall = _other_process([sys.executable, "-c", ICEBERG_READER, json.dumps(properties), f"{namespace}.kols", QUERY])
    _check("pyiceberg", published.rows_written, upserted.rows_written, reader["rows"], data)
    return {"publish": publish, "upsert": upsert, "reader": reader["seconds"], "reader_wall": wall}


DUCKLAKE_WORKER = textwrap.dedent("""
    import glob, json, os, sys, time
    import duckdb
    import duckdb_extension_ducklake, duckdb_extension_httpfs, duckdb_extension_postgres_scanner
    args = json.loads(sys.argv[1])
    started = time.perf_counter()  # the extensions' loading counts: a reader pays it every time
    conn = duckdb.connect()
    for package in (duckdb_extension_ducklake, duckdb_extension_httpfs, duckdb_extension_postgres_scanner):
        conn.execute("LOAD '" + glob.glob(os.path.dirname(package.__file__) + "/extensions/*/*.duckdb_extension")[0] + "'")
    endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
    conn.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{os.environ['AWS_ACCESS_KEY_ID']}', SECRET "
                 f"'{os.environ['AWS_SECRET_ACCESS_KEY']}', ENDPOINT '{endpoint}', URL_STYLE 'path', USE_SSL false, "
                 f"REGION '{os.environ['AWS_REGION']}')")
    read_only = " READ_ONLY," if args["op"] == "reader" else ""
    conn.execute(f"ATTACH 'ducklake:postgres:{args['catalog']}' AS lake ({read_only} DATA_PATH '{args['data_path']}')")
    conn.execute("USE lake")
    timed = time.perf_counter()
    result = {}
    if args["op"] == "publish":
        conn.execute(f"CREATE TABLE kols AS SELECT * FROM read_parquet('{args['table']}')")
    elif args["op"] == "upsert":
        conn.execute("BEGIN")
        conn.execute(f"CREATE TEMP TABLE incoming AS SELECT * FROM read_parquet('{args['upsert']}')")
        result["rows_written"] = conn.execute(
            "SELECT count(*) FROM incoming i JOIN kols k USING (org, id) WHERE i.updated_at > k.updated_at").fetchone()[0]
        conn.execute("MERGE INTO kols k USING incoming i ON k.org = i.org AND k.id = i.id "
                     "WHEN MATCHED AND i.updated_at > k.updated_at THEN UPDATE WHEN NOT MATCHED THEN INSERT")
        conn.execute("COMMIT")
    else:
        result["rows"] = [list(r) for r in conn.execute(args["query"]).fetchall()]
    result["seconds"] = time.perf_counter() - timed
    result["seconds_with_attach"] = time.perf_counter() - started
    print(json.dumps(result))
""")


def ducklake_run(run: int, data: dict[str, Path], python: str, postgres, bucket: str) -> dict[str, float]:
    database = f"ducklake_{run}_{os.getpid()}"
    postgres.create_database(database)
    args = {"catalog": f"dbname={database} host={postgres.host} port={postgres.port} user=postgres",
            "data_path": f"s3://{bucket}/ducklake_{run}/", "table": str(data["table"]), "upsert": str(data["upsert"]),
            "query": QUERY}
    publish, _ = _other_process([python, "-c", DUCKLAKE_WORKER, json.dumps(args | {"op": "publish"})])
    upsert, _ = _other_process([python, "-c", DUCKLAKE_WORKER, json.dumps(args | {"op": "upsert"})])
    reader, wall = _other_process([python, "-c", DUCKLAKE_WORKER, json.dumps(args | {"op": "reader"})])
    rows = [tuple(r) for r in reader["rows"]]
    _check("ducklake", None, upsert["rows_written"], rows, data)
    return {"publish": publish["seconds"], "upsert": upsert["seconds"], "reader": reader["seconds_with_attach"],
            "reader_wall": wall}


def _other_process(command: list[str]) -> tuple[dict, float]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{command[0]} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1]), time.perf_counter() - started


def _check(engine: str, published: int | None, written: int, rows: list, data: dict[str, Path]) -> None:
    """The upsert kept the newer rows only, and the reader saw every row of the table after it."""
    updated = expected_updated(data)
    total = sum(r[1] for r in rows)
    seen_updated = sum(r[2] for r in rows)
    if written != updated or seen_updated != updated or (published is not None and published != total):
        raise SystemExit(f"{engine}: wrote {written} rows in the upsert, reader saw {seen_updated} updated of {total}; "
                         f"expected {updated} updated")


def ducklake_in_duckdb_2(python: str | None) -> str:
    """Whether this project's DuckDB loads the ducklake wheel's extension: the engine's own answer."""
    if not python:
        return "not checked (no --ducklake-python)"
    found = subprocess.run([python, "-c", "import duckdb_extension_ducklake, glob, os; print(glob.glob(os.path.dirname("
                            "duckdb_extension_ducklake.__file__) + '/extensions/*/*.duckdb_extension')[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    try:
        duckdb.connect().execute(f"LOAD '{found}'")
    except duckdb.Error as error:
        return str(error).split("\n")[0].replace(found, Path(found).name)
    return "loaded"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--upsert", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ducklake-python", help="python of a venv with duckdb==1.5.5 and the duckdb-extension-* wheels")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks-table-format.md")
    args = parser.parse_args()

    figures: dict[str, list[dict[str, float]]] = {"pyiceberg": [], "ducklake": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as directory, running_postgres() as postgres, running_s3() as s3:
        os.environ.update(s3.env())
        data = build_data(Path(directory), args.rows, args.upsert)
        bucket = s3.create_bucket("bench")
        catalog_url = postgres.create_database("iceberg_catalog")
        for run in range(args.runs):  # alternating, so a busy moment of the machine hits both
            figures["pyiceberg"].append(pyiceberg_run(run, data, catalog_url, f"s3://{bucket}/iceberg"))
            if args.ducklake_python:
                figures["ducklake"].append(ducklake_run(run, data, args.ducklake_python, postgres, bucket))
        in_duckdb_2 = ducklake_in_duckdb_2(args.ducklake_python)

    medians = {engine: {op: statistics.median(r[op] for r in runs) for op in runs[0]} for engine, runs in figures.items() if runs}
    lines = [f"{args.rows:,} rows, upsert of {args.upsert:,} rows ({expected_updated_share(args.upsert)}), "
             f"medians of {args.runs} runs, seconds:", "",
             "| engine | publish | upsert (newer wins) | reader, in the process | reader, process wall |", "|---|---|---|---|---|"]
    for engine, m in medians.items():
        lines.append(f"| {engine} | {m['publish']:.2f} | {m['upsert']:.2f} | {m['reader']:.2f} | {m['reader_wall']:.2f} |")
    lines += ["", f"DuckDB {duckdb.__version__} loading the ducklake 1.5.5 wheel: {in_duckdb_2}", "",
              f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
              f"({os.cpu_count()} cores shared with other processes: single runs vary; compare the medians)."]
    print("\n".join(lines))
    result = {"rows": args.rows, "upsert": args.upsert, "runs": args.runs, "medians": medians, "raw": figures,
              "ducklake_in_duckdb_2": in_duckdb_2}
    if args.write:
        write_section(lines, args)
    print(json.dumps(result))


def expected_updated_share(upsert: int) -> str:
    return f"{upsert - upsert // 10:,} newer, {upsert // 10:,} older"


def write_section(lines: list[str], args: argparse.Namespace) -> None:
    command = f"python benchmarks/table_format.py --rows {args.rows} --upsert {args.upsert} --runs {args.runs}"
    if args.ducklake_python:
        command += " --ducklake-python DUCKDB_1_5_5_VENV/bin/python"
    measured = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = ["", "## Open table format: pyiceberg against DuckLake", "",
            f"Measured {measured} with `{command}` (Postgres catalog and moto S3 on 127.0.0.1; decision in "
            "docs/spec-decisions.md#table-format).", "", *lines]
    (DOCS / "benchmarks-table-format.md").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
