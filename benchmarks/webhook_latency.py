"""Event-to-queryable latency: a change made in the service → the new value visible in analytics.duckdb.

    .venv/bin/python benchmarks/webhook_latency.py [--changes 15] [--interval 3] [--kols 2000] [--appliers sensor,follower]

Starts, each on loopback, the deployment of docs/deploy.md on one host: the service (seeded with `--kols`
KOLs, its webhook delivery worker on), the receiver (registered for every event), a Postgres server holding
Dagster's storage, and deploy/Procfile's `code` (the code-location server) and `daemon` processes with
deploy/dagster.yaml unchanged (the queued run coordinator, the default run launcher: a process per run). A
nightly sync, recorded in the same instance, loads the warehouse and builds the marts first.

Then, for each applier in turn, back to back: `--changes` tier changes are made through the service's store
(one KOL each, `--interval` s apart, with jitter so changes do not line up with sensor ticks); a poller opens
analytics.duckdb read-only every 0.1 s and records when each KOL's new tier is visible.
- `sensor`: webhook_events_sensor (5 s minimum interval) requests an apply_webhook_events run per batch;
  the daemon dequeues it, the code server starts its process.
- `follower`: deploy/Procfile's `applier` (`commops events follow`) runs each batch in its own process
  as soon as the event is in the inbox; the sensor stands down.
Prints every latency, and p50/p95/max per applier.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
import duckdb  # noqa: E402

from commops_spec.constants import EVENTS, KOL_TIERS  # noqa: E402
from http_serving.sockets import free_port  # noqa: E402
from commops_cli.daemon_process import running_process  # noqa: E402
from commops_cli.sync_run import run_sync  # noqa: E402
from webhooks.subscriptions import Subscriptions  # noqa: E402
from service.local import LocalService, create_local_service  # noqa: E402
from webhooks.receiver.server import ReceiverServer  # noqa: E402
from webhooks.receiver.settings import ReceiverSettings  # noqa: E402
from tests.deploy.conftest import deploy_config, deployment_env, procfile_command, wait_for_code_server  # noqa: E402
from tests.postgres import running_postgres  # noqa: E402

APPLIERS = ("sensor", "follower")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between changes (±30%% jitter)")
    parser.add_argument("--kols", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on a change after this many seconds")
    parser.add_argument("--appliers", default=",".join(APPLIERS), help=f"comma-separated, in order: {', '.join(APPLIERS)}")
    args = parser.parse_args()
    appliers = [name.strip() for name in args.appliers.split(",") if name.strip()]
    if not appliers or set(appliers) - set(APPLIERS):
        parser.error(f"--appliers takes {', '.join(APPLIERS)}")
    print("command:", " ".join([os.path.relpath(sys.executable), *sys.argv]), flush=True)

    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="webhook-latency-") as tmp, running_postgres(durable=True) as postgres:
        root = Path(tmp)
        started = time.monotonic()
        service = create_local_service(
            root / "service.db", org_name="Benchmark Medical Devices", kols=args.kols, products=20, start=True,
            # rate limits off, and a 1 s window so the (still counted) X-RateLimit-Remaining never slows the
            # sync: the latency is the pipeline's; deliveries to the loopback receiver allowed; failure
            # e-mails to a port where nothing listens
            settings={"rate_limits_enabled": False, "rate_window_seconds": 1, "webhook_allow_private": True,
                      "webhook_smtp_port": free_port()},
        )
        print(f"service seeded with {args.kols} KOLs: {time.monotonic() - started:.1f} s", flush=True)
        base_url = service.server.base_url
        data_dir = root / "data"
        receiver = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
        home = root / "dagster_home"
        home.mkdir(mode=0o700)
        (home / "dagster.yaml").write_text(yaml.safe_dump(deploy_config({}), sort_keys=False))
        env = deployment_env(home, free_port(), postgres.create_database("dagster"))
        code_env = {**env, "COMMOPS_BASE_URL": base_url, "COMMOPS_API_KEY": service.api_key, "COMMOPS_DATA_DIR": str(data_dir)}
        os.environ.update({key: code_env[key] for key in ("COMMOPS_API_KEY", "DAGSTER_POSTGRES_URL")})
        try:
            started = time.monotonic()
            with dg.DagsterInstance.from_config(str(home)) as instance:  # the deployment's: its marts are built
                run_sync(base_url=base_url, data_dir=data_dir, progress=False, enrich_details_limit=0, instance=instance)
            print(f"nightly sync of {args.kols} KOLs: {time.monotonic() - started:.1f} s", flush=True)
            with Subscriptions(base_url, service.api_key) as subscriptions:
                subscriptions.register(receiver.url, list(EVENTS), receiver.settings.secrets_file)
            log = root / "code_server.log"
            with running_process(procfile_command("code", code_env), code_env, log) as code_server:
                wait_for_code_server(code_server, log)
                with running_process(procfile_command("daemon", env), env, root / "daemon.log"):
                    for number, applier in enumerate(appliers):
                        print(f"== {applier} ==", flush=True)
                        with _applier(applier, code_env, root):
                            results[applier] = measure(service, data_dir / "analytics.duckdb", args, skip=number * args.changes)
                            _drain(data_dir, home, args.timeout * 5)  # the next applier starts from an idle pipeline
        finally:
            receiver.stop()
            service.server.stop()

    for applier, latencies in results.items():
        # A change never seen counts as slower than every seen one: the percentiles are over all of them.
        every = latencies + [math.inf] * (args.changes - len(latencies))
        print(f"{applier}: {len(latencies)} of {args.changes} changes visible: p50 {_seconds(statistics.median(every))}, "
              f"p95 {_seconds(percentile(every, 0.95))}, max {_seconds(max(every))}")


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if math.isfinite(value) else "not visible"


def _drain(data_dir: Path, home: Path, timeout: float) -> None:
    """Wait until the inbox holds no pending event and no apply run is unfinished."""
    from pipelines.jobs import APPLY_WEBHOOK_EVENTS
    from resources.inbox import open_inbox

    unfinished = dg.RunsFilter(job_name=APPLY_WEBHOOK_EVENTS, statuses=[
        dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED])
    deadline = time.monotonic() + timeout
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            with open_inbox(data_dir) as inbox:
                pending = inbox.counts()["pending"]
            if not pending and not instance.get_runs_count(filters=unfinished):
                return
            time.sleep(1)
    print(f"  (still busy after {timeout:.0f} s: {pending} event(s) pending)", flush=True)


@contextmanager
def _applier(name: str, env: dict[str, str], root: Path) -> Iterator[None]:
    """For `follower`, the follower's process, given a sensor tick to take over; nothing more for `sensor`."""
    if name == "sensor":
        yield
        return
    log = root / "applier.log"
    with running_process(procfile_command("applier", env), env, log) as process:
        deadline = time.monotonic() + 60
        while "applying events as they arrive" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the follower did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        time.sleep(6)  # the sensor's next tick sees the beat and stands down
        yield


def measure(service: LocalService, analytics: Path, args, skip: int = 0) -> list[float]:
    from service.store import db, kols

    conn = db.connect(service.db_path)
    ids = [row[0] for row in conn.execute("SELECT id FROM kols WHERE is_archived = 0 ORDER BY id LIMIT ? OFFSET ?",
                                       (args.changes, skip))]
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
            time.sleep(0.1)

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
