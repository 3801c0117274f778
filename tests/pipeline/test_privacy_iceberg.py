"""Erasure and retention on the Iceberg tables (COMMOPS_ICEBERG_*), against a real Postgres catalog and moto's
S3 server: one person planted in every personal field is published by two nightly syncs (two snapshots of
their rows); `locate` names the current table and the older snapshot, an erasure killed after expiring the
snapshots and before deleting their files, run again, leaves no marker in any object of the bucket (data
files, manifests, manifest lists, metadata); the other rows read back as analytics.duckdb has them.
Retention expires older snapshots and deletes the files only they referenced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

from assets.snapshot_date import today
from privacy.retention import apply_retention
from resources.iceberg import open_catalog
from resources.settings import ICEBERG_CATALOG_URL_ENV, ICEBERG_WAREHOUSE_ENV
from tests.pipeline.object_store_scan import s3_hits
from tests.pipeline.sync_support import query, sync
from tests.pipeline.test_iceberg_tables import differences, iceberg_env, read_back  # noqa: F401 (fixture)
from tests.pipeline.test_privacy_erase import NEEDLES, _change_title, _cli, _hits, planted_and_synced

REPO = Path(__file__).resolve().parents[2]
PERSON_TABLES = ["kols", "kol_details"]


def _erase_killed_before_deleting_files(data_dir: Path, kol_id: str) -> None:
    """The erasure in a process of its own, killed (SIGKILL) once an expiry has committed, before its files go."""
    script = ("import os, signal, sys\nfrom pathlib import Path\nimport privacy.object_stores as o\n"
              "from privacy import erase as e\n"
              "def killed(self, table):\n    if self._journal(table).exists(): os.kill(os.getpid(), signal.SIGKILL)\n"
              "o.IcebergTables._finish_journal = killed\n"
              "data = Path(sys.argv[1])\ne.erase(data, e.resolve(data, kol_id=sys.argv[2]))\n")
    killed = subprocess.run([sys.executable, "-c", script, str(data_dir), kol_id], cwd=REPO, timeout=180,
                            env=os.environ | {"PYTHONPATH": str(REPO)})
    assert killed.returncode == -signal.SIGKILL


def _live_files(env: dict[str, str]) -> set[str]:
    """The data and position-delete files of each table's current snapshot."""
    catalog = open_catalog(env[ICEBERG_CATALOG_URL_ENV], env[ICEBERG_WAREHOUSE_ENV])
    files = set()
    for identifier in catalog.list_tables("commops"):
        table = catalog.load_table(identifier)
        files |= {entry.data_file.file_path.split("/", 3)[3] for manifest in table.current_snapshot().manifests(table.io)
                  for entry in manifest.fetch_manifest_entry(table.io)}
    return files


def test_erase_removes_the_person_from_the_iceberg_tables_and_every_file_of_their_old_snapshots(
        iceberg_env, make_service, s3, tmp_path, monkeypatch):
    from service.store import db, kols

    service, kol_id, data_dir = planted_and_synced(make_service, tmp_path, monkeypatch)
    _change_title(service, kol_id)
    sync(service, data_dir, enrich_details_limit=20)  # the person's new version: their old one is in a snapshot
    bucket = iceberg_env[ICEBERG_WAREHOUSE_ENV].removeprefix("s3://").split("/", 1)[0]
    planted = s3_hits(s3, bucket, NEEDLES)
    assert any(".parquet (reader)" in h for h in planted) and any(".avro (reader)" in h for h in planted), planted

    located = _cli("privacy", "locate", "--kol", kol_id, "--data-dir", str(data_dir))
    # Two in the current snapshot's data files: the new version, and the old one a position-delete file deletes
    assert "iceberg        2 row(s) hold the person  commops.kols\n" in located, located
    assert "  commops.kols@snapshot " in located and "  commops.kol_details\n" in located

    _erase_killed_before_deleting_files(data_dir, kol_id)
    assert s3_hits(s3, bucket, NEEDLES)  # the expired snapshots' files: still there
    output = _cli("privacy", "erase", "--kol", kol_id, "--data-dir", str(data_dir))
    assert "Erased" in output
    assert s3_hits(s3, bucket, NEEDLES) == [] and _hits(data_dir) == []
    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", PERSON_TABLES)
    assert {t: d[1:] for t, d in differences(data_dir / "analytics.duckdb", copy, PERSON_TABLES, stamps=False).items()} == {
        t: (0, 0) for t in PERSON_TABLES}  # the other KOLs kept, the person in neither
    assert query(copy, "SELECT count(*) FROM kols") == [(10,)]
    assert "Nothing left to erase" in _cli("privacy", "erase", "--kol", kol_id, "--data-dir", str(data_dir))

    # Retention a week later: every snapshot but the current expires (a sync writes one per table it changes).
    other = query(data_dir / "analytics.duckdb", f"SELECT id FROM kols WHERE id <> '{kol_id}' LIMIT 1")[0][0]
    with service.connect() as conn, db.transaction(conn):
        kols.update_kol(conn, service.org_id, other, {"title": "Dean"})
    sync(service, data_dir)
    before = {k for k in s3.keys(bucket) if not k.endswith(".metadata.json")}  # an expiry adds one (kept)
    removed = apply_retention(data_dir, date.fromisoformat(today()) + timedelta(days=8), days=7)
    assert removed.iceberg_snapshots > 0
    after = {k for k in s3.keys(bucket) if not k.endswith(".metadata.json")}  # only the current snapshots' files
    assert {k for k in after if k.endswith(".parquet")} == _live_files(iceberg_env) and after < before
    copy = read_back(iceberg_env, tmp_path / "from_iceberg.duckdb", PERSON_TABLES)
    assert {t: d[1:] for t, d in differences(data_dir / "analytics.duckdb", copy, PERSON_TABLES, stamps=False).items()} == {
        t: (0, 0) for t in PERSON_TABLES}
