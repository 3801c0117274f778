"""Benchmark: the nightly sync with the lake local against the lake on S3 (COMMOPS_LAKE_URL), same run.

    .venv/bin/python benchmarks/lake_s3.py [--runs 3] [--scale 1.0] [--write]

Seeds the dataset of benchmarks/nightly_sync.py (100,000 KOLs times --scale), serves it without rate
limits in its own process, starts moto's S3 API server on 127.0.0.1 (tests/s3.py, the tests' server),
then alternates N times: the core sync (`run_sync`, KOL details off) into a fresh data directory with
the lake local, and with the lake in a fresh bucket, each in a child process. Prints medians, the ratio
S3 / local and each side's peak RSS. moto keeps objects in memory on the same 2 cores: the ratio is the
cost of the protocol (uploads, manifests, downloads for the warehouse load), not of a network.
--write saves the figures to docs/benchmarks-lake-s3.json, which `python -m benchmarks` renders into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "benchmarks-lake-s3.json"
sys.path.insert(0, str(ROOT))

from benchmarks.nightly_sync import CONCURRENCY, SYNC, seed_service, serving  # noqa: E402
from tests.s3 import running_s3  # noqa: E402


def _sync(base_url: str, key: str, data_dir: Path, env: dict[str, str]) -> dict:
    """One core sync in a child process with `env` added (imports excluded from its wall time)."""
    child_env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith("COMMOPS_LAKE")} | env
    out = subprocess.run([sys.executable, "-c", SYNC, base_url, key, str(data_dir), "0", str(CONCURRENCY)],
                         cwd=ROOT, env=child_env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sync failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["failed_checks"]:
        raise SystemExit(f"sync had failed checks: {result['failed_checks']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--write", action="store_true", help=f"save the figures to {FIGURES.relative_to(ROOT)}")
    args = parser.parse_args()
    loads = []

    with tempfile.TemporaryDirectory(prefix="commops-bench-") as tmp, running_s3() as s3:
        tmp_path = Path(tmp)
        db_path, key = seed_service(tmp_path, args.scale)
        with serving(db_path) as base_url:
            _sync(base_url, key, tmp_path / "warm-up", {})  # the service's caches, not measured
            local, on_s3 = [], []
            for run in range(args.runs):
                local.append(_sync(base_url, key, tmp_path / f"local-{run}", {}))
                lake_url = f"s3://{s3.create_bucket('bench')}/commops/lake"
                on_s3.append(_sync(base_url, key, tmp_path / f"s3-{run}", s3.env() | {"COMMOPS_LAKE_URL": lake_url}))
                loads.append(round(os.getloadavg()[0], 1))
                print(f"run {run + 1}: lake local {local[-1]['seconds']:.1f}s, lake on S3 {on_s3[-1]['seconds']:.1f}s",
                      flush=True)

    local_s = statistics.median(r["seconds"] for r in local)
    s3_s = statistics.median(r["seconds"] for r in on_s3)
    figures = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/lake_s3.py " + " ".join(sys.argv[1:]),
        "kols": local[-1]["assets"]["lake/kols"]["rows"],
        "runs": args.runs,
        "local_seconds": [round(r["seconds"], 2) for r in local],
        "s3_seconds": [round(r["seconds"], 2) for r in on_s3],
        "local_median": round(local_s, 2),
        "s3_median": round(s3_s, 2),
        "ratio": round(s3_s / local_s, 2),
        "ratios": [round(b["seconds"] / a["seconds"], 2) for a, b in zip(local, on_s3, strict=True)],
        "local_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in local)),
        "s3_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in on_s3)),
        "load_average": loads,
    }
    print(f"\n== core sync, {figures['kols']:,} KOLs, lake local vs on S3 (moto on 127.0.0.1), medians of {args.runs} runs ==")
    print(f"lake local     {local_s:.2f}s  peak RSS {figures['local_peak_rss_mb']} MB")
    print(f"lake on S3     {s3_s:.2f}s  peak RSS {figures['s3_peak_rss_mb']} MB")
    print(f"ratio S3 / local  {figures['ratio']:.2f}  (run by run: {', '.join(map(str, figures['ratios']))}; "
          f"1-minute load average {loads})")
    if args.write:
        FIGURES.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"wrote {FIGURES.relative_to(ROOT)}")

if __name__ == "__main__":
    main()
