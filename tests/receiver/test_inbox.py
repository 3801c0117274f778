"""The inbox's Python API (what the sensor and the incremental job use), across processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from commops_spec.timestamps import parse_timestamp
from tests.receiver.conftest import body_of, envelope
from webhook_receiver.envelope import parse_envelope
from webhook_receiver.inbox import Inbox, retry_delay

ROOT = Path(__file__).resolve().parents[2]

# The inbox as the first receiver made it (before quarantine), to test the in-place migration.
FIRST_SCHEMA = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, event TEXT NOT NULL, created_at TEXT NOT NULL,
    organization_id TEXT, received_at TEXT NOT NULL, payload BLOB NOT NULL, known_event INTEGER NOT NULL,
    applied_at TEXT, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT
);
CREATE INDEX events_pending ON events (seq) WHERE applied_at IS NULL;
"""


def add(inbox: Inbox, env: dict) -> bool:
    raw = body_of(env)
    return inbox.add(raw, parse_envelope(raw))


def test_add_stores_the_raw_bytes_once_per_event_id(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox" / "webhooks.db")
    env = envelope("kol.created")
    raw = body_of(env)
    assert add(inbox, env) is True
    assert add(inbox, env) is False
    [stored] = inbox.get([env["id"]])
    assert stored.payload == raw and stored.envelope().as_sent == env
    assert (stored.event, stored.created_at, stored.organization_id) == ("kol.created", env["created_at"], "org_test")
    assert stored.known_event and stored.applied_at is None and stored.attempts == 0
    assert stored.received_at.endswith("Z")
    assert inbox.counts() == {
        "total": 1, "pending": 1, "backing_off": 0, "failing": 0, "quarantined": 0, "applied": 0, "unknown_event": 0
    }


def test_add_many_reports_duplicates_within_one_batch(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    a, b = envelope(), envelope()
    items = [(body_of(e), parse_envelope(body_of(e))) for e in (a, b, a)]
    assert inbox.add_many(items) == [True, True, False]


def test_pending_is_oldest_first_and_mark_applied_removes_events(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    envs = [envelope() for _ in range(5)]
    for env in envs:
        add(inbox, env)
    assert [e.id for e in inbox.pending()] == [e["id"] for e in envs]
    assert [e.id for e in inbox.pending(limit=2)] == [e["id"] for e in envs[:2]]
    assert inbox.mark_applied([envs[0]["id"], envs[2]["id"]], "2026-05-01T00:00:00.000000Z") == 2
    assert inbox.mark_applied([envs[0]["id"]]) == 0  # already applied: keeps its first time
    assert [e.id for e in inbox.pending()] == [envs[1]["id"], envs[3]["id"], envs[4]["id"]]
    assert inbox.get([envs[0]["id"]])[0].applied_at == "2026-05-01T00:00:00.000000Z"


def test_mark_failed_counts_attempts_and_holds_the_event_back_before_the_next_one(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    env, other = envelope(), envelope()
    add(inbox, env)
    add(inbox, other)
    before = datetime.now(UTC)
    assert inbox.mark_failed([env["id"]], "warehouse locked") == []
    [event] = inbox.get([env["id"]])
    assert (event.attempts, event.last_error) == (1, "warehouse locked")
    waits = parse_timestamp(event.retry_after) - before
    assert timedelta(seconds=29) < waits < timedelta(seconds=32)  # the first wait: 30 s
    assert [e.id for e in inbox.pending()] == [other["id"]]  # held back; the event behind it goes on
    assert inbox.counts()["failing"] == 1 and inbox.counts()["backing_off"] == 1 and inbox.counts()["pending"] == 2


def test_retry_delays_grow_and_are_capped() -> None:
    assert [retry_delay(n).total_seconds() for n in range(1, 7)] == [30, 120, 480, 1920, 3600, 3600]


def test_the_same_run_counts_one_failure_however_many_steps_report_it(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    env = envelope()
    add(inbox, env)
    inbox.mark_failed([env["id"]], "refetch failed", run_id="run-1")
    inbox.mark_failed([env["id"]], "publish failed", run_id="run-1")  # the run's failure sensor, later
    inbox.mark_failed([env["id"]], "publish failed", run_id="run-2")
    assert inbox.get([env["id"]])[0].attempts == 2


def test_an_event_failing_max_attempts_times_is_quarantined_and_retry_puts_it_back(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db", max_attempts=3)
    env, other = envelope(), envelope()
    add(inbox, env)
    add(inbox, other)
    assert inbox.mark_failed([env["id"]], "one") == []
    assert inbox.mark_failed([env["id"]], "two") == []
    assert inbox.mark_failed([env["id"]], "three") == [env["id"]]
    [event] = inbox.quarantined()
    assert (event.id, event.attempts, event.last_error, event.retry_after) == (env["id"], 3, "three", None)
    assert event.quarantined_at is not None
    assert [e.id for e in inbox.pending()] == [other["id"]]
    assert inbox.mark_failed([env["id"]], "four") == []  # quarantined: no longer counted
    assert inbox.counts()["quarantined"] == 1 and inbox.counts()["pending"] == 1

    assert inbox.retry([env["id"], other["id"], "wh_evt_unknown"]) == [env["id"]]  # only what was set aside
    [back] = inbox.get([env["id"]])
    assert (back.attempts, back.quarantined_at, back.retry_after, back.last_error) == (0, None, None, "three")
    assert [e.id for e in inbox.pending()] == [env["id"], other["id"]]


def test_quarantine_sets_an_event_aside_at_once_and_retry_all_puts_every_one_back(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    envs = [envelope() for _ in range(3)]
    for env in envs:
        add(inbox, env)
    assert inbox.quarantine([envs[0]["id"]], "created_at: not an ISO 8601 timestamp") == 1
    inbox.mark_failed([envs[1]["id"]], "refetch failed")
    assert [e.id for e in inbox.quarantined()] == [envs[0]["id"]]
    assert [e.id for e in inbox.failing()] == [envs[1]["id"]]
    assert [e.id for e in inbox.pending()] == [envs[2]["id"]]
    assert inbox.retry() == [envs[0]["id"], envs[1]["id"]]
    assert [e.id for e in inbox.pending()] == [e["id"] for e in envs]


def test_an_inbox_file_of_the_first_schema_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.db"
    conn = sqlite3.connect(path)
    conn.executescript(FIRST_SCHEMA)
    old = envelope()
    conn.execute(
        "INSERT INTO events (id, event, created_at, organization_id, received_at, payload, known_event, attempts, last_error)"
        " VALUES (?, ?, ?, ?, ?, ?, 1, 2, 'earlier failure')",
        (old["id"], old["event"], old["created_at"], "org_test", "2026-05-01T12:00:01.000000Z", body_of(old)),
    )
    conn.commit()
    conn.close()

    inbox = Inbox(path, max_attempts=3)
    [event] = inbox.pending()
    assert (event.id, event.attempts, event.last_error, event.quarantined_at) == (old["id"], 2, "earlier failure", None)
    assert inbox.mark_failed([old["id"]], "third failure") == [old["id"]]  # the new columns are written
    new = envelope()
    assert add(inbox, new)
    assert [e.id for e in inbox.pending()] == [new["id"]]
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(events)")}
    assert {"quarantined_at", "retry_after", "failed_by"} <= columns
    indexes = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "events_open" in indexes and "events_pending" not in indexes
    Inbox(path)  # opening it again changes nothing


def test_unknown_event_names_are_stored_and_flagged(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    env = envelope("kol.teleported")
    assert add(inbox, env)
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
        add(inbox, env)
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
        add(inbox, env)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0 and int(out) == 200
    counts = inbox.counts()
    assert counts["total"] == 500 and counts["applied"] >= 200
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
