"""The inbox holds full payloads (KOLs' personal data): `commops receiver run` keeps it, and the data
directory it makes, owner-only, whatever umask it was started with."""

from __future__ import annotations

from pathlib import Path

import httpx

from http_serving.sockets import free_port
from tests.file_modes import loose_umask, mode, reachable_by_others
from tests.processes import terminate
from tests.receiver.conftest import envelope, post_signed, start_receiver_process


def test_the_receiver_under_a_loose_umask_stores_payloads_where_only_its_user_can_read_them(tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    process = start_receiver_process(port, data_dir, preexec_fn=loose_umask)
    try:
        with httpx.Client(timeout=10) as client:
            assert post_signed(client, f"http://127.0.0.1:{port}/webhooks/commops", envelope()).status_code == 200
        inbox = data_dir / "inbox"
        files = [inbox / "webhooks.db", inbox / "webhooks.db-wal", inbox / "webhooks.db-shm"]
        assert all(path.exists() for path in files)  # the receiver holds the database open: WAL files exist
        assert {path.name: oct(mode(path)) for path in [inbox, *files]} == {
            "inbox": "0o700", "webhooks.db": "0o600", "webhooks.db-wal": "0o600", "webhooks.db-shm": "0o600"}
        assert reachable_by_others(data_dir) == []
    finally:
        terminate(process)
        process.stderr.close()
