"""Event-to-queryable latency: a change made in the service → the new value visible in analytics.duckdb.

    .venv/bin/python benchmarks/webhook_latency.py [--changes 20] [--interval 3] [--kols 2000]

Starts, each on loopback: the service (seeded with `--kols` KOLs, its webhook delivery worker on),
the receiver (registered for every event), and `dagster-daemon run` on the repo's code location
(workspace.yaml) with a temporary DAGSTER_HOME holding the repo's dagster.yaml: the daemon runs
webhook_events_sensor (5 s minimum interval) and launches apply_webhook_events runs exactly as
`dagster dev` does. A nightly sync (in-process) loads the warehouse first.

Then `--changes` tier changes are made through the service's store (one KOL each, `--interval` s
apart, with jitter so changes do not line up with sensor ticks); a poller opens analytics.duckdb
read-only every 0.2 s and records when each KOL's new tier is visible. Prints every latency and
p50/p95/max.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
import duckdb  # noqa: E402

from commops_spec.constants import EVENTS, KOL_TIERS  # noqa: E402
from http_serving.sockets import free_port  # noqa: E402
from commops_cli.daemon_process import running_daemon  # noqa: E402
from commops_cli.sync_run import run_sync  # noqa: E402
from webhooks.subscriptions import Subscriptions  # noqa: E402
from service.local import LocalService, create_local_service  # noqa: E402
from webhooks.receiver.server import ReceiverServer  # noqa: E402
from webhooks.receiver.settings import ReceiverSettings  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between changes (±30%% jitter)")
    parser.add_argument("--kols", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on a change after this many seconds")
    args = parser.parse_args()
    print("command:", " ".join([os.path.relpath(sys.executable), *sys.argv]))

    with tempfile.TemporaryDirectory(prefix="webhook-latency-") as tmp:
        root = Path(tmp)
        service = create_local_service(
            root / "service.db", org_name="Benchmark Medical Devices", kols=args.kols, products=20, start=True,
            # rate limits off, and a 1 s window so the (still counted) X-RateLimit-Remaining never slows the
            # sync: the latency is the pipeline's; deliveries to the loopback receiver allowed; failure
            # e-mails to a port where nothing listens
            settings={"rate_limits_enabled": False, "rate_window_seconds": 1, "webhook_allow_private": True,
                      "webhook_smtp_port": free_port()},
        )
        base_url = service.server.base_url
        data_dir = root / "data"
        receiver = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
        env = {"COMMOPS_BASE_URL": base_url, "COMMOPS_API_KEY": service.api_key, "COMMOPS_DATA_DIR": str(data_dir)}
        os.environ["COMMOPS_API_KEY"] = service.api_key  # the in-process sync's resource reads it (a dg.EnvVar)
        try:
            started = time.monotonic()
            run_sync(base_url=base_url, data_dir=data_dir, progress=False, enrich_details_limit=0,
                     instance=dg.DagsterInstance.ephemeral())
            print(f"nightly sync of {args.kols} KOLs: {time.monotonic() - started:.1f} s")
            with Subscriptions(base_url, service.api_key) as subscriptions:
                subscriptions.register(receiver.url, list(EVENTS), receiver.settings.secrets_file)
            with running_daemon(root / "dagster_home", env, root / "daemon.log"):
                latencies = measure(service, data_dir / "analytics.duckdb", args)
        finally:
            receiver.stop()
            service.server.stop()

    if latencies:
        print(
            f"{len(latencies)} of {args.changes} changes visible: p50 {statistics.median(latencies):.1f} s, "
            f"p95 {percentile(latencies, 0.95):.1f} s, max {max(latencies):.1f} s"
        )


def measure(service: LocalService, analytics: Path, args) -> list[float]:
    from service.store import db, kols

    conn = db.connect(service.db_path)
    ids = [row[0] for row in conn.execute("SELECT id FROM kols WHERE is_archived = 0 ORDER BY id LIMIT ?", (args.changes,))]
    expected: dict[str, tuple[str, float]] = {}  # kol id -> (new tier, time of the commit)
    seen: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            with lock:
                waiting = {k: v for k, v in expected.items() if k not in seen}
            if waiting and analytics.exists():
                try:
                    reader = duckdb.connect(str(analytics), read_only=True)
                    try:
                        marks = ",".join("?" * len(waiting))
                        rows = dict(reader.execute(f"SELECT id, tier FROM kols WHERE id IN ({marks})", list(waiting)).fetchall())
                    finally:
                        reader.close()
                except duckdb.Error:
                    rows = {}
                now = time.monotonic()
                with lock:
                    for kol_id, (tier, _) in waiting.items():
                        if rows.get(kol_id) == tier:
                            seen[kol_id] = now
            time.sleep(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    rng = random.Random(0)
    for kol_id in ids:
        current = conn.execute("SELECT tier FROM kols WHERE id = ?", (kol_id,)).fetchone()[0]
        tier = rng.choice([t for t in KOL_TIERS if t != current])
        with db.transaction(conn):
            kols.change_tier(conn, service.org_id, kol_id, tier)
        with lock:
            expected[kol_id] = (tier, time.monotonic())
        time.sleep(args.interval * rng.uniform(0.7, 1.3))
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        with lock:
            if len(seen) == len(expected):
                break
        time.sleep(0.2)
    done.set()
    poller.join()
    conn.close()
    latencies = []
    for kol_id, (_, changed_at) in expected.items():
        if kol_id in seen:
            latencies.append(seen[kol_id] - changed_at)
            print(f"  {kol_id}: {seen[kol_id] - changed_at:.1f} s")
        else:
            print(f"  {kol_id}: not visible within {args.timeout:.0f} s")
    return latencies


if __name__ == "__main__":
    main()
