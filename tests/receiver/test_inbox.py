"""The inbox's Python API (what the sensor and the incremental job use), across processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.receiver.conftest import body_of, envelope
from webhook_receiver.inbox import Inbox

ROOT = Path(__file__).resolve().parents[2]


def test_add_stores_the_raw_bytes_once_per_event_id(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox" / "webhooks.db")
    env = envelope("kol.created")
    raw = body_of(env)
    assert inbox.add(raw, env) is True
    assert inbox.add(raw, env) is False
    [stored] = inbox.get([env["id"]])
    assert stored.payload == raw and stored.envelope() == env
    assert (stored.event, stored.created_at, stored.organization_id) == ("kol.created", env["created_at"], "org_test")
    assert stored.known_event and stored.applied_at is None and stored.attempts == 0
    assert stored.received_at.endswith("Z")
    assert inbox.counts() == {"total": 1, "pending": 1, "applied": 0, "failing": 0, "unknown_event": 0}


def test_add_many_reports_duplicates_within_one_batch(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    a, b = envelope(), envelope()
    assert inbox.add_many([(body_of(a), a), (body_of(b), b), (body_of(a), a)]) == [True, True, False]


def test_pending_is_oldest_first_and_mark_applied_removes_events(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    envs = [envelope() for _ in range(5)]
    for env in envs:
        inbox.add(body_of(env), env)
    assert [e.id for e in inbox.pending()] == [e["id"] for e in envs]
    assert [e.id for e in inbox.pending(limit=2)] == [e["id"] for e in envs[:2]]
    assert inbox.mark_applied([envs[0]["id"], envs[2]["id"]], "2026-05-01T00:00:00.000000Z") == 2
    assert inbox.mark_applied([envs[0]["id"]]) == 0  # already applied: keeps its first time
    assert [e.id for e in inbox.pending()] == [envs[1]["id"], envs[3]["id"], envs[4]["id"]]
    assert inbox.get([envs[0]["id"]])[0].applied_at == "2026-05-01T00:00:00.000000Z"


def test_mark_failed_keeps_events_pending_and_counts_attempts(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    env = envelope()
    inbox.add(body_of(env), env)
    inbox.mark_failed([env["id"]], "warehouse locked")
    inbox.mark_failed([env["id"]], "warehouse locked again")
    [event] = inbox.pending()
    assert (event.attempts, event.last_error) == (2, "warehouse locked again")
    assert inbox.counts()["failing"] == 1


def test_unknown_event_names_are_stored_and_flagged(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    env = envelope("kol.teleported")
    assert inbox.add(body_of(env), env)
    assert inbox.get([env["id"]])[0].known_event is False
    assert inbox.counts()["unknown_event"] == 1


def test_every_connection_uses_wal_and_full_sync(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    conn = inbox._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_another_process_marks_events_while_this_one_writes(tmp_path: Path) -> None:
    """The sensor's process marks events applied while the receiver's process keeps adding."""
    path = tmp_path / "webhooks.db"
    inbox = Inbox(path)
    first = [envelope() for _ in range(200)]
    for env in first:
        inbox.add(body_of(env), env)
    script = (
        "import sys; from webhook_receiver.inbox import Inbox\n"
        "inbox = Inbox(sys.argv[1]); done = 0\n"
        "while done < 200:\n"
        "    batch = inbox.pending(limit=20)\n"
        "    done += inbox.mark_applied([e.id for e in batch])\n"
        "print(done)\n"
    )
    env_vars = {**os.environ, "PYTHONPATH": str(ROOT)}
    reader = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, env=env_vars)
    later = [envelope() for _ in range(300)]
    for env in later:
        inbox.add(body_of(env), env)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0 and int(out) == 200
    counts = inbox.counts()
    assert counts["total"] == 500 and counts["applied"] >= 200
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
