"""Benchmark: a second nightly sync after 1% of the KOLs changed, beside the first (full) sync.

    .venv/bin/python benchmarks/incremental_sync.py [--kols 10000] [--changed 0.01]

Seeds the service (other lists scaled as in nightly_sync.py), serves it in a child process, runs
`run_sync` (KOL details off) into a fresh data directory, changes `--changed` of the KOLs through
the service's store (a tier change each, as the activity simulator does), then runs `run_sync`
again on the same data directory. Prints both runs' requests and seconds and their ratio.

What this measures, honestly: the nightly sync is a full snapshot of today's lists (the API has no
"changed since" filter on its lists), so the second run pages through every list again, and its
requests equal the first run's. What is incremental is the webhook path (`commops events apply`,
benchmarks/webhook_latency.py), which refetches only the rows events name.
Last line: the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.nightly_sync import CONCURRENCY, SYNC, _child, seed_service, serving  # noqa: E402


def change_kols(db_path: Path, fraction: float, seed: int = 7) -> int:
    from commops_spec.constants import KOL_TIERS
    from service.store import db, kols

    conn = db.connect(str(db_path))
    try:
        rows = conn.execute("SELECT id, org_id, tier FROM kols WHERE is_archived = 0").fetchall()
        rng = random.Random(seed)
        chosen = rng.sample(rows, max(1, int(len(rows) * fraction)))
        with db.transaction(conn):
            for kol_id, org_id, tier in chosen:
                kols.change_tier(conn, org_id, kol_id, next(t for t in KOL_TIERS if t != tier))
        return len(chosen)
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kols", type=int, default=10_000)
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of active KOLs changed")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="commops-incr-bench-") as tmp:
        tmp_path = Path(tmp)
        db_path, key = seed_service(tmp_path, args.kols / 100_000)
        with serving(db_path) as base_url:
            data_dir = str(tmp_path / "data")
            full = _child(SYNC, base_url, key, data_dir, "0", str(CONCURRENCY))
            changed = change_kols(db_path, args.changed)
            second = _child(SYNC, base_url, key, data_dir, "0", str(CONCURRENCY))

    def requests(run: dict) -> int:
        return sum(a["requests"] or 0 for name, a in run["assets"].items() if name.startswith("lake/"))

    figures = {"kols_changed": changed, "full_seconds": full["seconds"], "full_requests": requests(full),
               "second_seconds": second["seconds"], "second_requests": requests(second)}
    figures["seconds_ratio"] = figures["second_seconds"] / figures["full_seconds"]
    figures["requests_ratio"] = figures["second_requests"] / figures["full_requests"]
    print(f"full sync:              {figures['full_seconds']:.1f} s, {figures['full_requests']} list requests")
    print(f"after {changed} KOLs changed ({args.changed:.0%}): {figures['second_seconds']:.1f} s, "
          f"{figures['second_requests']} list requests")
    print(f"second / full: time {figures['seconds_ratio']:.2f}, requests {figures['requests_ratio']:.2f} "
          "(the nightly sync is a full snapshot: it pages every list again)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
