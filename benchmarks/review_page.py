"""The review page with 100k planned changes: median latency of its pages and of "approve all matching".

    .venv/bin/python -m benchmarks.review_page [--changes 100000] [--runs 5]

Builds a warehouse whose organization has `--changes` planned field updates (one per KOL) and as many
reconciliation rows (a tenth of them probable matches, the rest conflicts), serves the page in a thread and
times each request `--runs` times over HTTP with a signed-in session: the summary, the first and the last page
of the plan, the plan filtered by field and by institution, the probable matches, the audit, and approving
every change of one field (the warehouse written, then republished). Prints one line per request: median and
slowest, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import httpx

from crm.review_page.server import ReviewServer, page_config
from crm.review_page.settings import ReviewSettings
from crm.tables import ensure_tables
from resources.warehouse import WarehouseResource

FIELDS = ("title", "phone", "department", "city")


def build(data_dir: Path, changes: int) -> None:
    warehouse = WarehouseResource(data_dir=str(data_dir))
    with warehouse.writer() as session:
        conn: duckdb.DuckDBPyConnection = session.conn
        ensure_tables(conn)
        conn.execute("""INSERT INTO reconciliation_runs (org, run_id, reconciled_at, source, kols, contacts, matched,
            conflict, probable_match, match_threshold) VALUES ('default', 'bench', now(), 'salesforce', ?, ?, 0, ?, ?, 0.9)""",
                     [changes, changes, changes - changes // 10, changes // 10])
        conn.execute(f"""INSERT INTO kol_crm_reconciliation BY NAME
SELECT 'default' AS org, 'bench' AS run_id, now() AS reconciled_at,
       CASE WHEN i % 10 = 0 THEN 'probable_match' ELSE 'conflict' END AS status,
       printf('kol_%07d', i) AS kol_id, true AS kol_primary, printf('003%015d', i) AS crm_id,
       printf('Dr First%d Last%d', i, i) AS kol_name, printf('First%d Last%d', i, i) AS crm_name,
       printf('person%d@hospital%d.org', i, i % 500) AS kol_email, printf('p%d@mail.example', i) AS crm_email,
       printf('Hospital %d of Somewhere', i % 500) AS institution,
       CASE WHEN i % 10 <> 0 THEN to_json([{{'field': ['{"','".join(FIELDS)}'][i % 4 + 1], 'kol_value': 'Chief of Cardiology',
                                             'crm_value': 'Head of Cardiology'}}]) END AS differences,
       CASE WHEN i % 10 = 0 THEN 0.9 + (i % 100) / 1000.0 END AS match_score,
       CASE WHEN i % 10 = 0 THEN CASE WHEN i % 100 >= 50 THEN '0.95-1.00' ELSE '0.90-0.95' END END AS score_band,
       i % 10 = 0 AS needs_review
FROM range(?) t(i)""", [changes])
        conn.execute(f"""INSERT INTO crm_writeback_plan BY NAME
SELECT 'default' AS org, 'bench' AS run_id, md5(i::VARCHAR) AS plan_key, 'update' AS action, printf('kol_%07d', i) AS kol_id,
       printf('003%015d', i) AS crm_id, ['{"','".join(FIELDS)}'][i % 4 + 1] AS field, 'Head of Cardiology' AS old_value,
       'Chief of Cardiology' AS new_value, printf('Dr First%d Last%d', i, i) AS kol_name,
       printf('Hospital %d of Somewhere', i % 500) AS institution
FROM range(?) t(i)""", [changes])
    warehouse.publish_analytics()


def timed(call, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = call()
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code in (200, 303), answer.status_code
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        started = time.perf_counter()
        build(data_dir, args.changes)
        print(f"built {args.changes:,} planned changes in {time.perf_counter() - started:.1f} s")
        page = ReviewServer(page_config("127.0.0.1", data_dir, settings=ReviewSettings())).start()
        try:
            with httpx.Client(base_url=page.url, timeout=120) as client:
                client.get("/login", params={"token": page.config.access.token})
                last = (args.changes // 50 - 1) * 50
                for name, path in (("summary", "/o/default/"), ("plan, first page", "/o/default/plan"),
                                   ("plan, last page", f"/o/default/plan?offset={last}"),
                                   ("plan, field filter", "/o/default/plan?field=phone&offset=5000"),
                                   ("plan, institution filter", "/o/default/plan?institution=hospital+42+"),
                                   ("probable matches", "/o/default/matches?score_band=0.95-1.00"),
                                   ("all rows, conflicts", "/o/default/rows?status=conflict&field=title"),
                                   ("audit", "/o/default/audit")):
                    median, slowest = timed(lambda p=path: client.get(p), args.runs)
                    print(f"{name:<28} median {median:8.1f} ms  slowest {slowest:8.1f} ms")
                csrf = client.get("/o/default/plan").text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
                for decision in ("approve", "clear"):  # approve all matching, then take it back (same size each run)
                    median, slowest = timed(lambda d=decision: client.post("/o/default/plan", data={
                        "csrf": csrf, "matching": d, "f_field": "title"}), args.runs)
                    print(f"{decision + ' all matching (25%)':<28} median {median:8.1f} ms  slowest {slowest:8.1f} ms")
        finally:
            page.stop()


if __name__ == "__main__":
    main()
