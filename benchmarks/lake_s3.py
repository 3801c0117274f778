"""Benchmark: the nightly sync with the lake and warehouse local against on S3 plus Iceberg, same run.

    .venv/bin/python benchmarks/lake_s3.py [--runs 3] [--scale 1.0] [--write]

Seeds the dataset of benchmarks/nightly_sync.py (100,000 KOLs times --scale), serves it without rate
limits in its own process, starts moto's S3 API server on 127.0.0.1 (tests/s3.py, the tests' server)
and a Postgres server (tests/postgres.py, fsync on as in production), then alternates N times three
arms, the core sync (`run_sync`, KOL details off) into a fresh data directory, each in a child process:
  local     the lake and the warehouse local (the default);
  s3        the lake in a fresh bucket (COMMOPS_LAKE_URL);
  iceberg   the lake in a fresh bucket and the current-state tables also published as Iceberg tables
            (COMMOPS_ICEBERG_*: a fresh catalog database in Postgres, a fresh warehouse bucket).
Prints medians, the ratios remote / local and each arm's peak RSS. moto keeps objects in memory on the
same 2 cores: the ratios are the cost of the protocols (uploads, manifests, downloads for the warehouse
load, Iceberg commits), not of a network.
--write saves the figures to docs/benchmarks-lake-s3.json, which `python -m benchmarks` renders into
docs/benchmarks.md.

    .venv/bin/python benchmarks/lake_s3.py --night second [--scale 1.0] [--changed 0.01]

measures the Iceberg arm on a second night instead: a sync into fresh buckets and a fresh catalog, then
--changed of the KOLs changed in the service's store (a tier each, benchmarks/incremental_sync.py), then a
second sync into the same data directory (the same snapshot date), and prints, per Iceberg table, the rows
each night wrote (data rows, and rows deleted by position-delete files) and each night's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "benchmarks-lake-s3.json"
sys.path.insert(0, str(ROOT))

from benchmarks.nightly_sync import CONCURRENCY, SYNC, seed_service, serving  # noqa: E402
from resources.settings import ICEBERG_CATALOG_URL_ENV, ICEBERG_WAREHOUSE_ENV  # noqa: E402
from tests.postgres import PostgresServer, running_postgres  # noqa: E402
from tests.s3 import S3Server, running_s3  # noqa: E402

ARMS = {"local": "lake and warehouse local", "s3": "lake on S3", "iceberg": "lake on S3 + Iceberg tables"}


def _sync(base_url: str, key: str, data_dir: Path, env: dict[str, str]) -> dict:
    """One core sync in a child process with `env` added (imports excluded from its wall time)."""
    child_env = {k: v for k, v in os.environ.items()
                 if k != "DAGSTER_HOME" and not k.startswith(("COMMOPS_LAKE", "COMMOPS_ICEBERG"))} | env
    out = subprocess.run([sys.executable, "-c", SYNC, base_url, key, str(data_dir), "0", str(CONCURRENCY)],
                         cwd=ROOT, env=child_env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sync failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["failed_checks"]:
        raise SystemExit(f"sync had failed checks: {result['failed_checks']}")
    return result


def _arm_env(arm: str, run: int, s3: S3Server, postgres: PostgresServer) -> dict[str, str]:
    """What the arm's sync is given: fresh buckets and a fresh catalog database, as a first sync meets them."""
    if arm == "local":
        return {}
    env = s3.env() | {"COMMOPS_LAKE_URL": f"s3://{s3.create_bucket('bench')}/commops/lake"}
    if arm == "iceberg":
        env |= {ICEBERG_CATALOG_URL_ENV: postgres.create_database(f"iceberg_{run}"),
                ICEBERG_WAREHOUSE_ENV: f"s3://{s3.create_bucket('tables')}/commops/tables"}
    return env


def _check_published(postgres: PostgresServer, catalog_url: str) -> None:
    """The Iceberg arm did publish: its catalog names the current-state tables."""
    tables = {name for (name,) in postgres.execute("SELECT table_name FROM iceberg_tables", catalog_url.rsplit("/", 1)[1])}
    if not {"kols", "campaigns", "products", "signals"} <= tables:
        raise SystemExit(f"the Iceberg arm published no tables (catalog holds {sorted(tables)})")


def _second_night(args: argparse.Namespace, tmp_path: Path, db_path: Path, key: str, base_url: str,
                  s3: S3Server, postgres: PostgresServer) -> None:
    from benchmarks.incremental_sync import change_kols

    env, data_dir = _arm_env("iceberg", 0, s3, postgres), tmp_path / "second-night"
    nights = [_sync(base_url, key, data_dir, env)]
    changed = change_kols(db_path, args.changed)
    nights.append(_sync(base_url, key, data_dir, env))
    published = [night["assets"]["analytics"]["iceberg"] for night in nights]
    tables = sorted(k.removeprefix("iceberg_rows_written_") for k in published[1] if k.startswith("iceberg_rows_written_"))
    print(f"\n== Iceberg on the second night: {nights[0]['assets']['lake/kols']['rows']:,} KOLs, {changed:,} changed "
          f"({args.changed:.0%}), same snapshot date ==")
    print(f"{'table':<28} {'night 1 rows':>12} {'night 2 rows':>12} {'night 2 deletes':>15}")
    for table in tables:
        print(f"{table:<28} {published[0].get(f'iceberg_rows_written_{table}', 0):>12,} "
              f"{published[1][f'iceberg_rows_written_{table}']:>12,} {published[1].get(f'iceberg_deletes_written_{table}', 0):>15,}")
    for n, (night, figures) in enumerate(zip(nights, published, strict=True), 1):
        print(f"night {n}: sync {night['seconds']:.1f}s, of which the Iceberg publish {figures.get('iceberg_seconds', 0):.1f}s, "
              f"peak RSS {night['peak_rss_mb']:.0f} MB")
    print(json.dumps({"kols": nights[0]["assets"]["lake/kols"]["rows"], "changed": changed,
                      "seconds": [round(n["seconds"], 2) for n in nights], "iceberg": published}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--write", action="store_true", help=f"save the figures to {FIGURES.relative_to(ROOT)}")
    parser.add_argument("--night", choices=("first", "second"), default="first",
                        help="first: the three arms compared; second: the Iceberg arm's second night")
    parser.add_argument("--changed", type=float, default=0.01, help="--night second: the share of KOLs changed")
    args = parser.parse_args()
    loads = []

    with tempfile.TemporaryDirectory(prefix="commops-bench-") as tmp, running_s3() as s3, \
            running_postgres(durable=True) as postgres:
        tmp_path = Path(tmp)
        db_path, key = seed_service(tmp_path, args.scale)
        with serving(db_path) as base_url:
            _sync(base_url, key, tmp_path / "warm-up", {})  # the service's caches, not measured
            if args.night == "second":
                return _second_night(args, tmp_path, db_path, key, base_url, s3, postgres)
            results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
            for run in range(args.runs):
                for arm in ARMS:
                    env = _arm_env(arm, run, s3, postgres)
                    results[arm].append(_sync(base_url, key, tmp_path / f"{arm}-{run}", env))
                    if arm == "iceberg":
                        _check_published(postgres, env[ICEBERG_CATALOG_URL_ENV])
                loads.append(round(os.getloadavg()[0], 1))
                print(f"run {run + 1}: " + ", ".join(f"{ARMS[arm]} {results[arm][-1]['seconds']:.1f}s" for arm in ARMS),
                      flush=True)

    local = results["local"]
    medians = {arm: statistics.median(r["seconds"] for r in results[arm]) for arm in ARMS}
    figures = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/lake_s3.py " + " ".join(sys.argv[1:]),
        "kols": local[-1]["assets"]["lake/kols"]["rows"],
        "runs": args.runs,
        "load_average": loads,
    }
    for arm in ARMS:
        figures[f"{arm}_seconds"] = [round(r["seconds"], 2) for r in results[arm]]
        figures[f"{arm}_median"] = round(medians[arm], 2)
        figures[f"{arm}_peak_rss_mb"] = round(statistics.median(r["peak_rss_mb"] for r in results[arm]))
        if arm != "local":
            prefix = "" if arm == "s3" else f"{arm}_"  # "ratio", "ratios": the S3 arm's, as before
            figures[f"{prefix}ratio"] = round(medians[arm] / medians["local"], 2)
            figures[f"{prefix}ratios"] = [round(b["seconds"] / a["seconds"], 2) for a, b in zip(local, results[arm], strict=True)]
    print(f"\n== core sync, {figures['kols']:,} KOLs, local vs on S3 (moto on 127.0.0.1) vs on S3 + Iceberg "
          f"(catalog in Postgres), medians of {args.runs} runs ==")
    for arm in ARMS:
        print(f"{ARMS[arm]:<30} {medians[arm]:6.2f}s  peak RSS {figures[f'{arm}_peak_rss_mb']} MB")
    print(f"ratio lake on S3 / local             {figures['ratio']:.2f}  (run by run: {', '.join(map(str, figures['ratios']))})")
    print(f"ratio lake on S3 + Iceberg / local   {figures['iceberg_ratio']:.2f}  "
          f"(run by run: {', '.join(map(str, figures['iceberg_ratios']))})")
    print(f"1-minute load average after each round: {loads}")
    if args.write:
        FIGURES.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"wrote {FIGURES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
