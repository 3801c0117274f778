"""Benchmark: CRM reconciliation of 1,000,000 KOLs against ~1,000,000 contacts, 10% planted discrepancies.

    .venv/bin/python benchmarks/reconciliation.py [--runs 3] [--kols 1000000] [--rate 0.1] [--threads 2] [--memory 1GB]

Generates both sides in DuckDB (crm.salesforce_standin.discrepancies: generate_kols_sql, plant_discrepancies_sql)
into a fresh DuckDB file, then times `reconcile` (the whole run: keys, statuses, candidates,
replacing kol_crm_reconciliation) --runs times, each in a child process so its peak RSS is its
own. Prints generation time, each run's CPU seconds (the machine may be shared: CPU time / threads
is the floor of the wall time on idle cores), the median reconciliation wall time (aim < 10 s) and the largest
peak RSS (aim < 2 GB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, time
import duckdb
from crm.reconcile import reconcile
from benchmarks.memory import own_peak_rss_mb
path, threads, memory = sys.argv[1], sys.argv[2], sys.argv[3]
conn = duckdb.connect(path, config={"threads": int(threads), "memory_limit": memory, "preserve_insertion_order": False})
started = time.perf_counter()
result = reconcile(conn, "kols", "contacts")
wall = time.perf_counter() - started
conn.close()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "rss_mb": own_peak_rss_mb(), "cpu": usage.ru_utime + usage.ru_stime,
                  "counts": result.counts, "kols": result.kols, "contacts": result.contacts,
                  "duplicate_sets": result.duplicate_sets}))
"""


def generate(path: Path, kols: int, rate: float, threads: int, memory: str) -> float:
    import duckdb

    from crm.salesforce_standin.discrepancies import generate_kols_sql, plant_discrepancies_sql

    started = time.perf_counter()
    conn = duckdb.connect(str(path), config={"threads": threads, "memory_limit": memory})
    generate_kols_sql(conn, "kols", kols, seed=11)
    plant_discrepancies_sql(conn, "kols", "contacts", rate, seed=11)
    conn.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kols", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=0.1)
    from resources.warehouse import WarehouseResource

    job = WarehouseResource.model_fields  # the crm_reconciliation job's own settings, unless told otherwise
    parser.add_argument("--threads", type=int, default=job["reconcile_threads"].default)
    parser.add_argument("--memory", default=job["reconcile_memory_limit"].default, help="DuckDB memory_limit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reconciliation.duckdb"
        generation = generate(path, args.kols, args.rate, args.threads, args.memory)
        print(f"generation: {generation:.2f} s ({args.kols:,} KOLs, {args.rate:.0%} planted)", flush=True)
        runs = []
        for n in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(path), str(args.threads), args.memory],
                cwd=ROOT, check=True, capture_output=True, text=True,
            )
            run = json.loads(out.stdout.strip().splitlines()[-1])
            runs.append(run)
            print(f"run {n + 1}: {run['wall']:.2f} s, CPU {run['cpu']:.1f} s (process, incl. start-up), "
                  f"peak RSS {run['rss_mb']:.0f} MB", flush=True)
        last = runs[-1]
        print(f"kols {last['kols']:,}, contacts {last['contacts']:,}: {json.dumps(last['counts'])}")
        print(f"reconciliation median: {statistics.median(r['wall'] for r in runs):.2f} s (aim < 10 s); "
              f"peak RSS max: {max(r['rss_mb'] for r in runs):.0f} MB (aim < 2048 MB)")


if __name__ == "__main__":
    main()
