"""Erasing one physician: markers planted in every personal field of one KOL (through the service's API)
reach the lake (three dates, a changed-rows side file), the warehouse and analytics.duckdb, the KOL
details, the webhook inbox and a report; `commops privacy erase` leaves none of them anywhere under the
data directory, read through each file's reader and as raw bytes; a killed erasure finishes when run again."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import duckdb
import httpx
import pytest
from click.testing import CliRunner

from commops_cli.commops import main
from privacy.suppression import PRIVACY_KEY_ENV, PrivacyStore
from resources.files import holding_lock
from resources.warehouse import WarehouseResource
from tests.pipeline.sync_support import sync

MARKERS = {
    "full_name": "Dr Zyxmarkname Qwvsurname",
    "email": "zyx.marker.mail@hospital-privacy.example",
    "phone": "+49 30 99887766123",
    "bio": "ZYXMARKBIO biography text",
    "notes": "ZYXMARKNOTES internal note",
    "city": "Zyxmarkcity",
    "institution": "Zyxmark Institute",
}
NEEDLES = ["zyxmarkname", "qwvsurname", "zyx.marker.mail", "99887766123", "zyxmarkbio", "zyxmarknotes",
           "zyxmarkcity", "zyxmark institute"]
SOURCES = ("service.db",)  # the local service's database: the source, erased by its owner
DATABASES = ("warehouse.duckdb", "analytics.duckdb", "marts.duckdb", ".marts-source.duckdb")


def _plant(service) -> str:
    body = {"full_name": MARKERS["full_name"], "specialties": ["cardiology"], "email": MARKERS["email"],
            "phone": MARKERS["phone"], "bio": MARKERS["bio"], "notes": MARKERS["notes"],
            "institution": MARKERS["institution"], "location": {"city": MARKERS["city"], "country": "DE"}}
    response = httpx.post(f"{service.base_url}/kols", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {service.api_key}"})
    assert response.status_code == 201, response.text
    return response.json()["data"]["id"]


def planted_and_synced(make_service, tmp_path: Path, monkeypatch) -> tuple[object, str, Path]:
    """A small service with the person planted, synced once (details enriched) with the privacy key set:
    (service, the person's KOL id, the data directory)."""
    monkeypatch.setenv(PRIVACY_KEY_ENV, "test-privacy-key-not-a-secret")
    service = make_service(kols=10, products=2, campaigns=2, signals=3)
    kol_id = _plant(service)
    data_dir = tmp_path / "data"
    sync(service, data_dir, enrich_details_limit=20)
    return service, kol_id, data_dir


def _hits(data_dir: Path) -> list[str]:
    """Every place under the data directory a marker is found: each file through its reader and as raw bytes."""
    hits = []
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file() and p.name not in SOURCES):
        try:
            raw = path.read_bytes().lower()
        except FileNotFoundError:  # an SQLite -shm/-wal file removed as its last connection closed meanwhile
            continue
        hits += [f"{path} (bytes): {n}" for n in NEEDLES if n.encode() in raw]
        text = ""
        if path.suffix == ".parquet" and not path.name.startswith("."):
            with closing(duckdb.connect()) as conn:
                text = str(conn.execute(f"SELECT * FROM read_parquet('{path}')").fetchall())
        elif path.suffix == ".duckdb":
            with closing(duckdb.connect(str(path), read_only=True)) as conn:
                for (table,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall():
                    text += str(conn.execute(f'SELECT * FROM "{table}"').fetchall())
        elif path.suffix == ".db" and raw.startswith(b"sqlite format 3"):
            with closing(sqlite3.connect(path)) as conn:
                for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    text += str(conn.execute(f'SELECT * FROM "{table}"').fetchall())
        elif path.suffix in (".csv", ".html", ".json", ".txt"):
            text = path.read_text(errors="replace")
        hits += [f"{path} (reader): {n}" for n in NEEDLES if n in text.lower()]
    return hits


def _webhook_update(data_dir: Path, kol_id: str) -> httpx.Response:
    """A signed kol.updated event for the person, through a real receiver on the data directory."""
    from tests.receiver.conftest import SECRET, envelope, post_signed
    from webhooks.receiver.server import ReceiverServer
    from webhooks.receiver.settings import ReceiverSettings

    event = envelope(data={"id": kol_id, "email": MARKERS["email"], "notes": MARKERS["notes"] + " again"})
    with ReceiverServer(ReceiverSettings(webhook_secrets=SECRET, data_dir=data_dir)) as receiver, \
            httpx.Client(timeout=10) as client:
        return post_signed(client, receiver.url, event)


def _inbox_events(data_dir: Path) -> int:
    with closing(sqlite3.connect(data_dir / "inbox" / "webhooks.db")) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def _change_title(service, kol_id: str) -> None:
    from commops_spec.timestamps import utc_now
    from service.store import db

    with closing(service.connect()) as conn, db.transaction(conn):
        conn.execute("UPDATE kols SET title = 'Zyxmark Professor', updated_at = ? WHERE id = ?",
                     [utc_now(), kol_id])


def _reconcile(tmp_path: Path, data_dir: Path):
    """A reconciliation against a Salesforce stand-in (outside the data directory) holding the person under
    another phone, its write-back applied: reports, reconciliation tables and audit rows hold the person."""
    from tests.crm.conftest import salesforce_env, start_standin
    from tests.crm.support import reconcile_against

    first, last = MARKERS["full_name"].split(" ", 1)[1].split()
    standin = start_standin(tmp_path / "salesforce")
    standin.add_contacts([{"FirstName": first, "LastName": last, "Email": MARKERS["email"], "Phone": "+49 30 5550000",
                           "Title": "Dr", "Account.Name": MARKERS["institution"]}])
    try:
        return reconcile_against(salesforce_env(standin), data_dir, apply=True)
    finally:
        standin.stop()


@pytest.fixture
def planted(make_service, tmp_path, monkeypatch):
    monkeypatch.setenv(PRIVACY_KEY_ENV, "test-privacy-key-not-a-secret")
    service = make_service(kols=40, products=3, campaigns=3, signals=5)
    kol_id = _plant(service)
    data_dir = tmp_path / "data"
    summary = sync(service, data_dir, enrich_details_limit=100, marts=True)
    today = summary.snapshot_date
    folder = data_dir / "lake" / "org=default" / "kols"
    for earlier in ("2026-01-01", "2026-01-02"):  # the nights before: the same person, older dates
        shutil.copytree(folder / f"snapshot_date={today}", folder / f"snapshot_date={earlier}")
    shutil.rmtree(folder / f"snapshot_date={today}")
    _change_title(service, kol_id)  # the person changes: today's changed-rows file holds them
    sync(service, data_dir, enrich_details_limit=100, marts=True)
    assert (folder / f"snapshot_date={today}" / "changed" / "data.parquet").exists()
    assert _webhook_update(data_dir, kol_id).status_code < 300
    _reconcile(tmp_path, data_dir)
    # what a marts build killed mid-build leaves: its copy of the warehouse
    shutil.copyfile(data_dir / "warehouse.duckdb", data_dir / ".marts-source.duckdb")
    return service, data_dir, kol_id


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _killed_at_warehouse(data_dir: Path, kol_id: str) -> None:
    """The erasure run in a process of its own, killed (SIGKILL) as it reaches the warehouse."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    script = ("import os, signal, sys\nfrom pathlib import Path\nfrom privacy import erase as e\n"
              "data = Path(sys.argv[1])\n"
              "def stop(store):\n    if store == 'warehouse': os.kill(os.getpid(), signal.SIGKILL)\n"
              "e.erase(data, e.resolve(data, kol_id=sys.argv[2]), on_store=stop)\n")
    killed = subprocess.run([sys.executable, "-c", script, str(data_dir), kol_id], env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL


def test_erase_leaves_no_trace_even_killed_halfway_and_keeps_the_person_out(planted):
    service, data_dir, kol_id = planted
    assert len({h.split(" (")[0] for h in _hits(data_dir)}) >= 5  # lake x3+, warehouse, analytics, inbox, reports
    located = _cli("privacy", "locate", "--email", MARKERS["email"].upper(), "--data-dir", str(data_dir))
    for store in ("lake", "marts", "warehouse", "analytics", "inbox", "reports"):
        assert f"  {store}" in located, located
    for place in ("kol_details", "kol_360", "kol_history", "crm_writeback_audit", "kol_crm_reconciliation", "webhooks.db", "changed/data.parquet",
                  "latest.html", "latest.csv"):
        assert place in located, (place, located)
    elsewhere = _cli("privacy", "locate", "--kol", kol_id, "--org", "another", "--data-dir", str(data_dir))
    # Another organization's lake folders and rows are not searched (tables without `org`, the inbox and the
    # reports are the deployment's: searched whatever the organization).
    assert "org=default" not in elsewhere and ":kols\n" not in elsewhere and ":kol_details\n" not in elsewhere
    dry = _cli("privacy", "erase", "--kol", kol_id, "--dry-run", "--data-dir", str(data_dir))
    assert "would be erased" in dry and _hits(data_dir)

    _killed_at_warehouse(data_dir, kol_id)
    left = _hits(data_dir)
    # killed before the warehouse: the warehouse, its published copy and the marts (erased after it) hold the person
    assert left and not [hit for hit in left if not any(f"/{name} (" in hit for name in DATABASES)], left
    output = _cli("privacy", "erase", "--kol", kol_id, "--org", "default", "--data-dir", str(data_dir))
    assert "Erased" in output and "ask their owners" in output
    assert _hits(data_dir) == []
    with closing(duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True)) as conn:
        tombstoned = conn.execute("SELECT count(*) FROM crm_writeback_audit WHERE kol_id = '[erased]'").fetchone()[0]
    assert tombstoned > 0  # the audit keeps its rows, the person's values replaced
    again = _cli("privacy", "erase", "--email", MARKERS["email"], "--data-dir", str(data_dir))
    assert "Nothing left to erase" in again
    assert "Nothing found" in _cli("privacy", "locate", "--kol", kol_id, "--data-dir", str(data_dir))
    log = PrivacyStore(data_dir).entries()  # the killed run: logged with what it did before it was killed
    assert [entry[2] for entry in log] == ["erase-interrupted", "erase", "erase"]
    assert '"lake":' in log[0][4] and '"warehouse":' not in log[0][4] and log[1][5] > 0 and log[2][5] == 0
    assert not any(n in repr(log).lower() for n in NEEDLES) and kol_id not in repr(log)
    shown = _cli("privacy", "log", "--data-dir", str(data_dir))
    assert shown.count(" erase ") == 2 and "erase-interrupted" in shown and kol_id not in shown

    # The person stays out: a later sync drops them (counted), a webhook event is acknowledged, not stored.
    summary = sync(service, data_dir, enrich_details_limit=100, marts=True)
    kols = next(a for a in summary.assets if a.asset == "lake/kols")
    assert kols.metadata.get("suppressed") == 1
    assert not summary.failed_checks  # the completeness check counts the suppressed row toward the API's total
    events = _inbox_events(data_dir)
    assert _webhook_update(data_dir, kol_id).status_code < 300
    assert _inbox_events(data_dir) == events
    assert _hits(data_dir) == []


def test_an_erasure_waits_for_a_sync_writing_the_warehouse_and_says_so_in_a_line(tmp_path, monkeypatch):
    monkeypatch.setenv(PRIVACY_KEY_ENV, "test-privacy-key-not-a-secret")
    data_dir = tmp_path / "data"
    warehouse = WarehouseResource(data_dir=str(data_dir))
    data_dir.mkdir(mode=0o700)
    with closing(duckdb.connect(str(warehouse.path))) as conn:
        conn.execute("CREATE TABLE kols AS SELECT 'default' AS org, 'kol_waits1' AS id, ? AS email, ? AS full_name",
                     [MARKERS["email"], MARKERS["full_name"]])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with holding_lock(Path(warehouse.lock_path)):  # what a sync holds while it writes
        erasing = subprocess.Popen([sys.executable, "-m", "commops_cli", "privacy", "erase", "--kol", "kol_waits1",
                                    "--data-dir", str(data_dir)], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines = iter(erasing.stderr.readline, "")
        said = next((line for line in lines if "Waiting" in line or "Traceback" in line), "")
        assert said.startswith("Waiting for the warehouse lock") and "held by pid" in said, said
        with closing(duckdb.connect(str(warehouse.path), read_only=True)) as conn:
            assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == 1  # untouched while the sync writes
    output, errors = erasing.communicate(timeout=120)
    assert erasing.returncode == 0, errors
    assert "Erased" in output and "Got the warehouse lock" in errors and "Traceback" not in errors
    with closing(duckdb.connect(str(warehouse.path), read_only=True)) as conn:
        assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == 0
