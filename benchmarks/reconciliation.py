"""Benchmark: CRM reconciliation of 1,000,000 KOLs against ~1,000,000 contacts, 10% planted discrepancies.

    .venv/bin/python benchmarks/reconciliation.py [--runs 3] [--kols 1000000] [--rate 0.1] [--threads 2] [--memory 1GB]
                                                  [--nights]

Generates both sides in DuckDB (crm.salesforce_standin.discrepancies: generate_kols_sql, plant_discrepancies_sql)
into a fresh DuckDB file, then times `reconcile` (the whole run: keys, statuses, candidates,
replacing kol_crm_reconciliation) --runs times, each in a child process so its peak RSS is its
own. Prints generation time, each run's CPU seconds (the machine may be shared: CPU time / threads
is the floor of the wall time on idle cores), the median reconciliation wall time (aim < 10 s) and the largest
peak RSS (aim < 2 GB).

--nights: each run on a fresh copy, as the job runs: a first night with kept contact features
(crm/kept_features.py, none kept yet), 1% of the contacts retitled, then the second night twice on the same
data, without the kept features and with them. Prints each night's wall and CPU seconds and their medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
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
from crm import kept_features
path, threads, memory, kept_dir = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None
conn = duckdb.connect(path, config={"threads": int(threads), "memory_limit": memory, "preserve_insertion_order": False})
started = time.perf_counter()
if kept_dir:
    with kept_features.attached(conn, kept_dir, "default") as kept:
        result = reconcile(conn, "kols", "contacts", kept=kept)
else:
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
    parser.add_argument("--nights", action="store_true", help="a first and a second night, with kept features")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reconciliation.duckdb"
        generation = generate(path, args.kols, args.rate, args.threads, args.memory)
        print(f"generation: {generation:.2f} s ({args.kols:,} KOLs, {args.rate:.0%} planted)", flush=True)
        if args.nights:
            nights(path, Path(tmp), args)
            return
        runs = []
        for n in range(args.runs):
            run = child(path, args)
            runs.append(run)
            print(f"run {n + 1}: {run['wall']:.2f} s, CPU {run['cpu']:.1f} s (process, incl. start-up), "
                  f"peak RSS {run['rss_mb']:.0f} MB", flush=True)
        last = runs[-1]
        print(f"kols {last['kols']:,}, contacts {last['contacts']:,}: {json.dumps(last['counts'])}")
        print(f"reconciliation median: {statistics.median(r['wall'] for r in runs):.2f} s (aim < 10 s); "
              f"peak RSS max: {max(r['rss_mb'] for r in runs):.0f} MB (aim < 2048 MB)")


def child(path: Path, args: argparse.Namespace, kept_dir: Path | None = None) -> dict:
    """One reconciliation in a process of its own; its figures."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(args.threads), args.memory,
                          *([str(kept_dir)] if kept_dir else [])], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def nights(generated: Path, tmp: Path, args: argparse.Namespace) -> None:
    import duckdb

    figures: dict[str, list[dict]] = {"first night (kept rows written)": [], "second night, computed whole": [],
                                      "second night, from kept rows": []}
    for n in range(args.runs):
        path, kept_dir = tmp / f"night-{n}.duckdb", tmp / f"kept-{n}"
        shutil.copyfile(generated, path)
        first = child(path, args, kept_dir)
        with duckdb.connect(str(path)) as conn:
            conn.execute(f"UPDATE contacts SET title = coalesce(title, 'Physician') || ' (retitled)' "
                         f"WHERE hash(crm_id || '{n}') % 100 = 0")
        whole, kept = child(path, args), child(path, args, kept_dir)
        for name, run in zip(figures, (first, whole, kept)):
            figures[name].append(run)
            print(f"run {n + 1}, {name}: {run['wall']:.2f} s, CPU {run['cpu']:.1f} s, peak RSS {run['rss_mb']:.0f} MB",
                  flush=True)
        path.unlink()
        shutil.rmtree(kept_dir)
    for name, runs in figures.items():
        print(f"{name}: median {statistics.median(r['wall'] for r in runs):.2f} s, "
              f"CPU {statistics.median(r['cpu'] for r in runs):.1f} s")


if __name__ == "__main__":
    main()
