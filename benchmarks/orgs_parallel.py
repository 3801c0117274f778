"""Many organizations synced with 1 and with 2 parallel runs against the local service.

    .venv/bin/python benchmarks/orgs_parallel.py [--orgs 4] [--kols 20000] [--rounds 3] [--latency-ms 0]

Seeds `--orgs` organizations of `--kols` KOLs each (campaigns, products and signals scaled alike) into
one service database, served without rate limits in its own process, registers them (`commops orgs
add`, one key variable each), then alternates, `--rounds` times: `commops sync --all --max-parallel 1`
and `--max-parallel 2`, each into a fresh data directory (SQLite Dagster home, as the README's path).
Each organization's sync is its own process (a run worker): its peak RSS is its own VmHWM.
`--latency-ms` makes every request of the service take that long (a remote service: the sync waits on
the network, not on this machine's two cores, which the local service otherwise shares with the syncs).

Prints, per parallelism: median wall time of the whole --all, runs per minute, the per-organization
run time and peak RSS, and the ratio of the two wall times. Dagster's fixed cost per run on Postgres
against SQLite is benchmarks/dagster_overhead.py's.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SERVE = """
import sys
from service.server import ServiceServer
from service.settings import ServiceSettings
latency = float(sys.argv[2])
faults = {"fault_slow_rate": 1.0, "fault_slow_seconds": latency} if latency else {}
server = ServiceServer(ServiceSettings(db=sys.argv[1], rate_limits_enabled=False, **faults)).start()
print(server.base_url, flush=True)
sys.stdin.read()
server.stop()
"""


@contextmanager
def serving(db_path: Path, latency: float) -> Iterator[str]:
    """The service on `db_path` in its own process, every request taking at least `latency` s; its base URL."""
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(db_path), str(latency)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield server.stdout.readline().strip()
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def seed(directory: Path, orgs: int, kols: int) -> tuple[Path, dict[str, str]]:
    """One database, `orgs` organizations of `kols` KOLs; {org name: API key}."""
    from service import admin
    from service.seed import seed as seed_org
    from service.store.db import init_db

    db = directory / "service.db"
    init_db(db)
    keys = {}
    scale = kols / 100_000
    for i in range(orgs):
        name = f"org{i + 1}"
        org_id = admin.create_org(db, f"Benchmark {name}", "enterprise")
        keys[name] = admin.create_key(db, org_id, "all")
        started = time.perf_counter()
        seed_org(db, org_id, kols=kols, campaigns=max(1, int(5_000 * scale)), products=max(1, int(500 * scale)),
                 signals=max(1, int(100_000 * scale)), events=max(1, int(2_000 * scale)), random_seed=i + 1)
        print(f"seeded {name}: {kols} KOLs in {time.perf_counter() - started:.1f}s", flush=True)
    return db, keys


def sync_all(base_url: str, keys: dict[str, str], data_dir: Path, parallel: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_"))}
    env |= {f"{name.upper()}_KEY": key for name, key in keys.items()} | {"COMMOPS_DATA_DIR": str(data_dir)}
    commops = [sys.executable, "-m", "commops_cli"]
    for name in keys:
        subprocess.run([*commops, "orgs", "add", name, "--base-url", base_url, "--api-key-env", f"{name.upper()}_KEY"],
                       env=env, cwd=ROOT, check=True, capture_output=True)
    summary = data_dir / "summary.json"
    started = time.perf_counter()
    done = subprocess.run([*commops, "sync", "--all", "--max-parallel", str(parallel), "--enrich-limit", "0",
                           "--summary-json", str(summary)], env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sync --all failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return {"wall": wall, "runs": json.loads(summary.read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orgs", type=int, default=4)
    parser.add_argument("--kols", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every request of the service")
    args = parser.parse_args()
    print("command:", " ".join([os.path.relpath(sys.executable), *sys.argv]), flush=True)
    with tempfile.TemporaryDirectory(prefix="commops-orgs-") as tmp:
        db, keys = seed(Path(tmp), args.orgs, args.kols)
        results: dict[int, list[dict]] = {1: [], 2: []}
        with serving(db, args.latency_ms / 1000) as base_url:
            for round_ in range(args.rounds):
                for parallel in (1, 2):
                    result = sync_all(base_url, keys, Path(tmp) / f"data-{round_}-{parallel}", parallel)
                    results[parallel].append(result)
                    print(f"round {round_ + 1}, --max-parallel {parallel}: {result['wall']:.1f}s", flush=True)
    latency = f", {args.latency_ms:g} ms per request" if args.latency_ms else ", a local service (no added latency)"
    print(f"\n== {args.orgs} organizations x {args.kols:,} KOLs{latency}, commops sync --all, medians of {args.rounds} ==")
    walls = {}
    for parallel, rounds in results.items():
        walls[parallel] = statistics.median(r["wall"] for r in rounds)
        per_run = statistics.median(run["seconds"] for r in rounds for run in r["runs"])
        print(f"--max-parallel {parallel}: wall {walls[parallel]:.1f}s, {args.orgs / walls[parallel] * 60:.1f} runs/min, "
              f"one organization's run {per_run:.1f}s")
    print(f"ratio wall 2 / 1: {walls[2] / walls[1]:.2f}")
    rss = [run["peak_rss_mb"] for rounds in results.values() for result in rounds for run in result["runs"]]
    print(f"peak RSS per run worker: median {statistics.median(rss):.0f} MB, max {max(rss):.0f} MB")


if __name__ == "__main__":
    main()
