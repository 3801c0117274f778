"""The inbox's Python API (what the receiver, the sensor and the incremental job use), across processes,
on both stores: every test taking `make_inbox` runs once on the SQLite file and once on Postgres."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from commops_spec.timestamps import parse_timestamp
from tests.conftest import InboxStore
from tests.receiver.conftest import body_of, envelope
from resources.inbox.envelope import parse_envelope
from resources.inbox import Inbox, retry_delay
from resources.inbox.stores import POSTGRES_TABLE

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
# The same on Postgres, as the first inbox there would have been made (no quarantine, no claims).
FIRST_POSTGRES_SCHEMA = f"""
CREATE TABLE {POSTGRES_TABLE} (
    seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, event TEXT NOT NULL, created_at TEXT NOT NULL,
    organization_id TEXT, received_at TEXT NOT NULL, payload BYTEA NOT NULL, known_event BOOLEAN NOT NULL,
    applied_at TEXT, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT
)
"""
MakeInbox = Callable[..., Inbox]


@pytest.fixture
def make_inbox(inbox_store: InboxStore, tmp_path: Path) -> MakeInbox:
    """Inbox(location, **options) on the store of this run (the same inbox each call)."""
    location = inbox_store.location(tmp_path)
    return lambda **options: Inbox(location, **options)


def add(inbox: Inbox, env: dict) -> bool:
    raw = body_of(env)
    return inbox.add(raw, parse_envelope(raw))


def test_add_stores_the_raw_bytes_once_per_event_id(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
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
        "total": 1, "pending": 1, "backing_off": 0, "failing": 0, "claimed": 0, "quarantined": 0, "applied": 0,
        "unknown_event": 0,
    }


def test_add_many_reports_duplicates_within_one_batch(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
    a, b = envelope(), envelope()
    items = [(body_of(e), parse_envelope(body_of(e))) for e in (a, b, a)]
    assert inbox.add_many(items) == [True, True, False]


def test_pending_is_oldest_first_and_mark_applied_removes_events(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
    envs = [envelope() for _ in range(5)]
    for env in envs:
        add(inbox, env)
    assert [e.id for e in inbox.pending()] == [e["id"] for e in envs]
    assert [e.id for e in inbox.pending(limit=2)] == [e["id"] for e in envs[:2]]
    assert inbox.mark_applied([envs[0]["id"], envs[2]["id"]], "2026-05-01T00:00:00.000000Z") == 2
    assert inbox.mark_applied([envs[0]["id"]]) == 0  # already applied: keeps its first time
    assert [e.id for e in inbox.pending()] == [envs[1]["id"], envs[3]["id"], envs[4]["id"]]
    assert inbox.get([envs[0]["id"]])[0].applied_at == "2026-05-01T00:00:00.000000Z"


def test_mark_failed_counts_attempts_and_holds_the_event_back_before_the_next_one(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
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


def test_the_same_run_counts_one_failure_however_many_steps_report_it(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
    env = envelope()
    add(inbox, env)
    inbox.mark_failed([env["id"]], "refetch failed", run_id="run-1")
    inbox.mark_failed([env["id"]], "publish failed", run_id="run-1")  # the run's failure sensor, later
    inbox.mark_failed([env["id"]], "publish failed", run_id="run-2")
    assert inbox.get([env["id"]])[0].attempts == 2


def test_an_event_failing_max_attempts_times_is_quarantined_and_retry_puts_it_back(make_inbox: MakeInbox) -> None:
    inbox = make_inbox(max_attempts=3)
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


def test_quarantine_sets_an_event_aside_at_once_and_retry_all_puts_every_one_back(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
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



def test_an_inbox_of_the_first_schema_is_migrated_in_place(inbox_store: InboxStore, tmp_path: Path, request) -> None:
    old = envelope()
    row = (old["id"], old["event"], old["created_at"], "org_test", "2026-05-01T12:00:01.000000Z", body_of(old))
    location = inbox_store.location(tmp_path)
    if inbox_store.url is None:
        location.parent.mkdir(parents=True)
        conn = sqlite3.connect(location)
        conn.executescript(FIRST_SCHEMA)
        conn.execute("INSERT INTO events (id, event, created_at, organization_id, received_at, payload, known_event, "
                     "attempts, last_error) VALUES (?, ?, ?, ?, ?, ?, 1, 2, 'earlier failure')", row)
        conn.commit()
        conn.close()
    else:
        server, database = request.getfixturevalue("postgres"), inbox_store.url.rsplit("/", 1)[1]
        server.execute(FIRST_POSTGRES_SCHEMA, database)
        server.execute(f"INSERT INTO {POSTGRES_TABLE} (id, event, created_at, organization_id, received_at, payload, "
                       "known_event, attempts, last_error) VALUES (%s, %s, %s, %s, %s, %s, true, 2, 'earlier failure')",
                       database, row)

    inbox = Inbox(location, max_attempts=3)
    [event] = inbox.pending()
    assert (event.id, event.attempts, event.last_error, event.quarantined_at) == (old["id"], 2, "earlier failure", None)
    assert inbox.mark_failed([old["id"]], "third failure") == [old["id"]]  # the new columns are written
    new = envelope()
    assert add(inbox, new)
    assert [e.id for e in inbox.claim([new["id"]], "run-1")] == [new["id"]]
    assert inbox.pending() == []
    if inbox_store.url is None:
        columns = {row[1] for row in sqlite3.connect(location).execute("PRAGMA table_info(events)")}
        indexes = {row[0] for row in sqlite3.connect(location).execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "events_open" in indexes and "events_pending" not in indexes
    else:
        columns = {row[0] for row in server.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", database, (POSTGRES_TABLE,))}
    assert {"quarantined_at", "retry_after", "failed_by", "claimed_by", "claimed_until"} <= columns
    Inbox(location)  # opening it again changes nothing


def test_unknown_event_names_are_stored_and_flagged(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
    env = envelope("kol.teleported")
    assert add(inbox, env)
    assert inbox.get([env["id"]])[0].known_event is False
    assert inbox.counts()["unknown_event"] == 1


def test_every_sqlite_connection_uses_wal_and_full_sync(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "webhooks.db")
    conn = inbox._store.connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_a_claimed_event_is_held_from_other_claimers_until_it_is_applied_failed_or_its_lease_lapses(make_inbox: MakeInbox) -> None:
    inbox = make_inbox()
    a, b, c = (envelope() for _ in range(3))
    for env in (a, b, c):
        add(inbox, env)
    ids = [a["id"], b["id"], c["id"]]

    [held] = inbox.claim([a["id"]], "run-1")
    assert (held.id, held.claimed_by) == (a["id"], "run-1") and held.claimed_until > held.received_at
    assert [e.id for e in inbox.pending()] == ids[1:]  # not ready for anyone else
    assert [e.id for e in inbox.claim(ids, "run-2")] == ids[1:]  # the rest: disjoint
    assert inbox.claim(ids, "run-3") == []
    assert inbox.counts()["claimed"] == 3 and inbox.counts()["pending"] == 3
    assert [e.id for e in inbox.claim([a["id"]], "run-1")] == [a["id"]]  # its own: renewed

    assert inbox.mark_failed([a["id"], b["id"]], "refetch failed", run_id="run-1") == []  # b is run-2's
    assert inbox.get([b["id"]])[0].attempts == 0
    assert inbox.quarantine([c["id"]], "unreadable", claimer="run-1") == 0  # c too
    [failed] = inbox.get([a["id"]])
    assert (failed.attempts, failed.claimed_by, failed.claimed_until) == (1, None, None)  # released
    assert inbox.mark_applied([b["id"]]) == 1
    assert inbox.get([b["id"]])[0].claimed_by is None

    d = envelope()
    add(inbox, d)
    lapsing = make_inbox(claim_lease=timedelta(0))  # a claimer that died: its lease is already over
    assert [e.id for e in lapsing.claim([d["id"]], "run-dead")] == [d["id"]]
    assert [e.id for e in inbox.pending()] == [d["id"]]
    assert [e.id for e in inbox.claim([a["id"], b["id"], c["id"], d["id"]], "run-4")] == [a["id"], d["id"]]
    # a: failed and released (a claim does not wait for retry_after: the run was given it); b: applied;
    # c: still run-2's


def test_two_claimers_at_once_get_disjoint_batches(make_inbox: MakeInbox) -> None:
    """The sensor beside `commops events apply` (or two daemons): claims in the same instant, on
    separate connections, of the same events, round after round."""
    inbox = make_inbox()
    envs = [envelope() for _ in range(400)]
    inbox.add_many([(body_of(e), parse_envelope(body_of(e))) for e in envs])
    claimers, owner = [make_inbox(), make_inbox()], {}
    for round_ in range(8):
        ids = [e["id"] for e in envs[round_ * 50 : (round_ + 1) * 50]]
        start, got = threading.Barrier(2), [[], []]

        def claim(n: int, ids=ids, start=start, got=got) -> None:
            start.wait()
            got[n] = [e.id for e in claimers[n].claim(ids, f"claimer-{n}")]
            claimers[n].close()

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not set(got[0]) & set(got[1]), f"round {round_}: one event claimed twice"
        assert sorted(got[0] + got[1]) == sorted(ids)
        owner.update({event_id: f"claimer-{n}" for n in range(2) for event_id in got[n]})
    assert {e.id: e.claimed_by for e in inbox.get(owner)} == owner  # as each was told
    assert inbox.counts()["claimed"] == 400


def test_claimers_in_other_processes_each_apply_disjoint_events_while_this_one_writes(
    inbox_store: InboxStore, tmp_path: Path
) -> None:
    """Two appliers in their own processes (a sensor's run and `commops events apply`) beside the
    receiver writing: every event is claimed and marked applied by exactly one of them."""
    location = str(inbox_store.location(tmp_path))
    inbox = Inbox(location)
    first = [envelope() for _ in range(200)]
    inbox.add_many([(body_of(e), parse_envelope(body_of(e))) for e in first])
    script = (
        "import sys, time; from resources.inbox import Inbox\n"
        "inbox = Inbox(sys.argv[1]); mine = []; deadline = time.monotonic() + 60\n"
        "while time.monotonic() < deadline:\n"
        "    batch = inbox.claim([e.id for e in inbox.pending(limit=20)], sys.argv[2])\n"
        "    inbox.mark_applied([e.id for e in batch]); mine += [e.id for e in batch]\n"
        "    counts = inbox.counts()\n"
        "    if not batch and counts['total'] == 500 and counts['pending'] == 0: break\n"
        "    time.sleep(0 if batch else 0.02)\n"
        "print(' '.join(mine))\n"
    )
    env_vars = {**os.environ, "PYTHONPATH": str(ROOT)}
    appliers = [subprocess.Popen([sys.executable, "-c", script, location, f"applier-{n}"], stdout=subprocess.PIPE,
                                 env=env_vars, text=True) for n in range(2)]
    later = [envelope() for _ in range(300)]
    for env in later:
        add(inbox, env)
    outputs = [applier.communicate(timeout=90)[0].split() for applier in appliers]
    assert all(applier.returncode == 0 for applier in appliers)
    assert not set(outputs[0]) & set(outputs[1])
    assert sorted(outputs[0] + outputs[1]) == sorted(e["id"] for e in [*first, *later])
    assert inbox.counts()["applied"] == 500 and inbox.counts()["total"] == 500
