"""The service's database holds webhook signing secrets in clear and KOLs' personal data: it is created
owner-only, with the folder made for it, whatever the umask, and so are the WAL files SQLite adds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.store import db
from tests.file_modes import loose_umask, mode

ROOT = Path(__file__).resolve().parents[2]


def test_the_database_commops_service_creates_under_a_loose_umask_is_owner_only_with_its_wal_files(tmp_path):
    data_dir = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMMOPS_DATA_DIR": str(data_dir)}
    env.pop("COMMOPS_SERVICE_DB", None)
    result = subprocess.run([sys.executable, "-m", "commops_cli", "service", "create-org", "Modes Medical", "--plan", "starter"],
                            env=env, capture_output=True, text=True, timeout=120, preexec_fn=loose_umask)
    assert result.returncode == 0, result.stderr
    database = data_dir / "service" / "service.db"
    assert (mode(database.parent), mode(database)) == (0o700, 0o600)

    conn = db.connect(database)  # a writer: SQLite adds the -wal and -shm files, in the database's mode
    try:
        with db.transaction(conn):
            conn.execute("UPDATE organizations SET name = 'Modes Medical Devices'")
        wal_files = [database.with_name("service.db-wal"), database.with_name("service.db-shm")]
        assert {path.name: oct(mode(path)) for path in wal_files} == {"service.db-wal": "0o600", "service.db-shm": "0o600"}
    finally:
        conn.close()


def test_an_existing_database_readable_by_others_is_made_owner_only_when_opened(tmp_path):
    database = tmp_path / "service.db"
    database.touch(mode=0o644)
    os.chmod(database, 0o644)
    db.init_db(database)
    assert mode(database) == 0o600
