"""One deployment on three "machines" that share nothing but one Postgres server and one S3 API server.
Each machine is a directory of its own (its data dir, its DAGSTER_HOME) and runs its
commands as separate processes, started in that directory with only its own environment:

- A runs the nightly sync (`commops sync`): the lake on S3, Dagster's storage in Postgres, the Iceberg
  tables published (catalog in Postgres, files on S3);
- B runs a receiver (`commops receiver run`, the inbox in Postgres) and the webhook job
  (`commops events apply`), which publishes the changes the service delivered after A's sync;
- C only reads: the Iceberg tables, from its own process, as docs/analysts.md shows.

C sees every row of both, equal to the service's truth (the API) table by table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from sync.catalog import CATALOG
from commops_spec.constants import EVENTS
from webhooks.subscriptions import Subscriptions
from pipelines.jobs import APPLY_WEBHOOK_EVENTS, NIGHTLY_SYNC
from resources.settings import ICEBERG_CATALOG_URL_ENV, ICEBERG_WAREHOUSE_ENV
from tests.deploy.conftest import TEST_OVERRIDES, deploy_config
from tests.pipeline.conftest import RunningService, start_service
from tests.pipeline.sync_support import api_items, assert_row_equals_item, query, table_rows
from tests.pipeline.webhook_stack import WEBHOOK_SETTINGS, new_kol
from tests.postgres import PostgresServer
from tests.processes import terminate
from tests.receiver.conftest import wait_for_receiver
from tests.s3 import S3Server
from tests.service.webhook_support import free_port
from tests.waiting import wait_until
from resources.inbox import INBOX_URL_ENV, Inbox
from webhooks.signatures import read_secrets_file

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SEED = {"kols": 300, "campaigns": 6, "products": 4, "signals": 40}
CHANGED = 4  # KOLs created, as many updated and as many archived after the nightly sync
# All a writing machine keeps on its own disk: its Dagster config and step logs, its warehouse and copy, locks.
# No lake (S3), no inbox and no Dagster storage (Postgres).
OWN_FILES = re.compile(r"dagster_home/(dagster\.yaml|storage/[^/]+/compute_logs/[^/]+)"
                       r"|data/(warehouse\.duckdb|analytics\.duckdb|analytics\.duckdb\.source\.json|warehouse\.lock|locks/[^/]+\.lock)"
                       # the marts this machine's nightly built beside its warehouse, and dbt's artifacts of that build
                       r"|data/(marts\.duckdb|\.marts-dbt/.+)"
                       # where no shared inbox is set, its alert incidents stay on the machine that saw them
                       r"|data/inbox/alerts\.db(-wal|-shm|-journal)?")


def machine_env(root: Path, **variables: str) -> dict[str, str]:
    """A machine's environment: this one without any COMMOPS_*, DAGSTER_* or AWS_* variable, plus its own."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_", "AWS_"))}
    return base | {"HOME": str(root), "PYTHONPATH": str(REPO)} | variables


def dagster_home(root: Path) -> Path:
    """The machine's DAGSTER_HOME: deploy/dagster.yaml (Dagster's storage in Postgres, DAGSTER_POSTGRES_URL)."""
    home = root / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(deploy_config(TEST_OVERRIDES), sort_keys=False))
    return home


def run(root: Path, env: dict[str, str], *command: str) -> str:
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(command[:3])} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


@contextmanager
def receiver(root: Path, env: dict[str, str], port: int) -> Iterator[None]:
    process = subprocess.Popen([str(BIN / "commops"), "receiver", "run", "--host", "127.0.0.1", "--port", str(port)],
                               cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_receiver(process, port)
        yield
    finally:
        terminate(process)
        process.stderr.close()


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def change_kols(service: RunningService, kol_ids: list[str]) -> tuple[dict[str, str], list[str]]:
    """CHANGED KOLs created, the first CHANGED of `kol_ids` updated, the next CHANGED archived, each in its
    own service transaction (its webhook event delivered by the service's worker); the titles set, the ids archived."""
    from service.store import db, kols

    titles, archived = {}, kol_ids[CHANGED:2 * CHANGED]
    conn = service.connect()
    try:
        for n in range(CHANGED):
            with db.transaction(conn):
                new_kol(conn, service.org_id, f"Three Machines {n}")
            with db.transaction(conn):
                titles[kol_ids[n]] = f"Head of Trials {n}"
                kols.update_kol(conn, service.org_id, kol_ids[n], {"title": titles[kol_ids[n]]})
            with db.transaction(conn):
                kols.archive_kol(conn, service.org_id, archived[n])
    finally:
        conn.close()
    return titles, archived


def test_three_machines_sharing_only_postgres_and_s3_the_reader_sees_every_nightly_row_and_every_webhook_update(
    postgres: PostgresServer, s3: S3Server, tmp_path: Path
) -> None:
    # The two shared servers: Dagster's storage, the inbox and the Iceberg catalog in Postgres; lake and tables on S3.
    tag = uuid.uuid4().hex[:8]
    dagster_url = postgres.create_database(f"dagster_{tag}")
    inbox_url = postgres.create_database(f"inbox_{tag}")
    tables = {ICEBERG_CATALOG_URL_ENV: postgres.create_database(f"iceberg_{tag}"),
              ICEBERG_WAREHOUSE_ENV: f"s3://{s3.create_bucket('tables')}/commops/tables"} | s3.env()
    lake_bucket = s3.create_bucket("lake")
    service = start_service(tmp_path / "service", **SEED, webhook_smtp_port=free_port(), **WEBHOOK_SETTINGS)
    machines = {name: tmp_path / f"machine_{name}" for name in "abc"}
    for root in machines.values():
        root.mkdir()
    a, b, c = machines.values()
    api = {"COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key}
    try:
        env_a = machine_env(a, **api, **tables, COMMOPS_DATA_DIR=str(a / "data"), DAGSTER_HOME=str(dagster_home(a)),
                            DAGSTER_POSTGRES_URL=dagster_url, COMMOPS_LAKE_URL=f"s3://{lake_bucket}/commops/lake")
        run(a, env_a, str(BIN / "commops"), "sync", "--no-progress", "--enrich-limit", "0")

        port = free_port()
        with Subscriptions(service.base_url, service.api_key) as subscriptions:  # the operator, once
            subscriptions.register(f"http://127.0.0.1:{port}/webhooks/commops", list(EVENTS), tmp_path / "secrets.json")
        [secret] = read_secrets_file(tmp_path / "secrets.json").values()
        env_b = machine_env(b, **api, **tables, COMMOPS_DATA_DIR=str(b / "data"), DAGSTER_HOME=str(dagster_home(b)),
                            DAGSTER_POSTGRES_URL=dagster_url, COMMOPS_WEBHOOK_SECRETS=secret, **{INBOX_URL_ENV: inbox_url})
        with receiver(b, env_b, port):
            kol_ids = sorted(query(a / "data" / "analytics.duckdb", "SELECT id FROM kols WHERE NOT is_archived"))
            titles, archived = change_kols(service, [kol_id for (kol_id,) in kol_ids])
            inbox = Inbox(inbox_url)
            try:
                wait_until(lambda: inbox.counts()["pending"] == 3 * CHANGED, timeout=30, interval=0.1,
                           what=f"{3 * CHANGED} deliveries stored in the shared inbox")
            finally:
                inbox.close()
        run(b, env_b, str(BIN / "commops"), "events", "apply")

        copy = c / "tables.duckdb"
        env_c = machine_env(c, **tables)
        names = [spec.table for spec in CATALOG] + ["webhook_events"]
        run(c, env_c, sys.executable, "-m", "tests.pipeline.iceberg_reader", str(copy), *names)

        for spec in CATALOG:  # C's tables equal the service's truth, row by row and field by field
            items, rows = api_items(service, spec), table_rows(copy, spec.table)
            assert sorted(rows) == sorted(items), f"{spec.table}: ids differ from the API's"
            for item_id, item in items.items():
                assert_row_equals_item(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
        kols = table_rows(copy, "kols")
        assert len(kols) == SEED["kols"] + CHANGED  # the nightly's rows and the created ones
        assert {kol_id: kols[kol_id]["title"] for kol_id in titles} == titles  # the updates won
        assert {kols[kol_id]["is_archived"] for kol_id in archived} == {True}
        delivered = postgres.execute("SELECT id FROM commops_inbox_events WHERE applied_at IS NOT NULL", f"inbox_{tag}")
        assert sorted(table_rows(copy, "webhook_events")) == sorted(i for (i,) in delivered)
        assert len(delivered) == 3 * CHANGED
    finally:
        service.server.stop()

    # Nothing shared but the two servers: each machine's disk holds its own files only ...
    for root in (a, b):
        assert sorted(f for f in files(root) if not OWN_FILES.fullmatch(f)) == [], root.name
    assert files(c) == {"tables.duckdb"}
    # ... and what they share is on the servers: the lake on S3, both machines' runs in Postgres.
    manifests = [key for key in s3.keys(lake_bucket) if key.endswith("/_manifest.json")]
    assert sorted(key.split("/")[3] for key in manifests) == sorted(spec.name for spec in CATALOG)
    runs = postgres.execute("SELECT pipeline_name, status FROM runs ORDER BY create_timestamp", f"dagster_{tag}")
    assert runs == [(NIGHTLY_SYNC, "SUCCESS"), (APPLY_WEBHOOK_EVENTS, "SUCCESS")]
