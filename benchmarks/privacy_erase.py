"""Benchmark: erasing one person (and 100 in one run) from a lake of nightly KOL snapshots and a warehouse.

    .venv/bin/python benchmarks/privacy_erase.py [--snapshots 365] [--kols 100000] [--people 1] [--runs 3] [--s3]

Builds, once, a lake of `--snapshots` nightly files of `--kols` KOL rows each (the KOL list's fields: id, name,
title, institution, email, phone, location, tags, `_extra`; zstd, row groups of 32,768) in which the people to
erase appear in every night, and a warehouse whose `kols` table holds the last night. Then, `--runs` times on a
fresh copy, runs `privacy.erase.erase` in a child process and reports its wall time, the bytes of the files it
rewrote (only those holding the person: every snapshot here, the worst case) and its peak RSS. The aim: one
person from 365 snapshots of 100k KOLs in under 5 minutes, and 100 people in one run about the cost of one.
--s3: the lake on S3 instead (COMMOPS_LAKE_URL, moto's S3 API server on 127.0.0.1, tests/s3.py): each run's
snapshots are published into a fresh bucket first (not timed), and the erasure downloads, rewrites and publishes
each snapshot again. moto keeps the objects in memory on the same cores: the protocol's cost, not a network's.
Last line: the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.s3 import running_s3  # noqa: E402

CHILD = """
import json, os, resource, sys, time
from pathlib import Path
from privacy import erase as e
data = Path(sys.argv[1]); ids = json.loads(sys.argv[2])
started = time.monotonic()
outcome = e.erase(data, e.resolve(data, kol_id=ids[0]).with_(tuple(ids[1:])))
print(json.dumps({"seconds": time.monotonic() - started, "rows": outcome.rows, "places": len(outcome.findings),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build(folder: Path, snapshots: int, kols: int) -> None:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [f"kol_{i:010x}" for i in range(kols)]
    table = pa.table({
        "id": ids,
        "full_name": [f"Dr Given{i} Family{i}" for i in range(kols)],
        "title": ["Chief of Cardiology", "Consultant Oncologist", "Attending Surgeon"] * (kols // 3) + ["Dr"] * (kols % 3),
        "institution": [f"Hospital {i % 997}" for i in range(kols)],
        "email": [f"given{i}.family{i}@hospital{i % 97}.example" for i in range(kols)],
        "phone": [f"+49 30 {i:08d}" for i in range(kols)],
        "location": [{"city": "Berlin", "state": None, "country": "DE"}] * kols,
        "tags": [["kol", "speaker"]] * kols,
        "updated_at": pa.array([1_700_000_000_000_000 + i for i in range(kols)], pa.timestamp("us", "UTC")),
        "_extra": pa.array([None] * kols, pa.string()),
    })
    lake = folder / "lake" / "org=default" / "kols"
    first = lake / "snapshot_date=2025-01-01" / "data.parquet"
    first.parent.mkdir(parents=True)
    pq.write_table(table, first, compression="zstd", row_group_size=32_768)
    for night in range(1, snapshots):
        day = time.strftime("%Y-%m-%d", time.gmtime(1_735_689_600 + night * 86_400))
        target = lake / f"snapshot_date={day}" / "data.parquet"
        target.parent.mkdir(parents=True)
        shutil.copyfile(first, target)
    with duckdb.connect(str(folder / "warehouse.duckdb")) as conn:
        conn.execute(f"CREATE TABLE kols AS SELECT 'default' AS org, * FROM read_parquet('{first}')")


def on_s3(lake: Path, s3) -> str:
    """The local lake's snapshots published, as a sync publishes them, into a fresh bucket; the lake's URL."""
    import pyarrow.parquet as pq

    from resources.lake_s3 import S3Lake

    url = f"s3://{s3.create_bucket('erase')}/commops/lake"
    os.environ.update(s3.env())
    target = S3Lake(url, "COMMOPS_LAKE_URL")
    for path in sorted(lake.rglob("data.parquet")):
        folder = str(path.parent.relative_to(lake))
        target.publish(path, folder, pq.ParquetFile(path).metadata.num_rows)
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=365)
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--people", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="the lake on S3 (moto's server on 127.0.0.1)")
    args = parser.parse_args()
    people = [f"kol_{i * (args.kols // max(args.people, 1)):010x}" for i in range(args.people)]
    s3_or_none = running_s3() if args.s3 else nullcontext()
    with tempfile.TemporaryDirectory(prefix="privacy-bench-") as temp, s3_or_none as s3:
        base = Path(temp) / "base"
        build(base, args.snapshots, args.kols)
        lake_bytes = sum(p.stat().st_size for p in (base / "lake").rglob("*.parquet"))
        results = []
        for run in range(args.runs):
            copy = Path(temp) / f"run{run}"
            shutil.copytree(base, copy, ignore=shutil.ignore_patterns("lake") if s3 else None)
            env = {**os.environ, "PYTHONPATH": str(ROOT), "COMMOPS_PRIVACY_KEY": "benchmark-key"}
            if s3:
                env |= s3.env() | {"COMMOPS_LAKE_URL": on_s3(base / "lake", s3)}
            out = subprocess.run([sys.executable, "-c", CHILD, str(copy), json.dumps(people)], env=env,
                                 capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            shutil.rmtree(copy)
    figures = {
        "snapshots": args.snapshots, "kols": args.kols, "people": args.people, "runs": args.runs,
        "lake": "s3" if args.s3 else "local",
        "lake_mb": round(lake_bytes / 2**20, 1),
        "bytes_rewritten_mb": round(lake_bytes / 2**20, 1),  # every snapshot holds the people here
        "rows_erased": results[0]["rows"],
        "wall_seconds_median": round(statistics.median(r["seconds"] for r in results), 1),
        "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in results)),
    }
    print(f"erase {args.people} person(s) from {args.snapshots} snapshots x {args.kols:,} KOLs{' on S3' * args.s3} "
          f"({figures['lake_mb']} MB, all rewritten): {figures['wall_seconds_median']} s median of {args.runs}, "
          f"peak RSS {figures['peak_rss_mb_median']} MB, {figures['rows_erased']} rows")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
