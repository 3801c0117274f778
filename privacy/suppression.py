"""The suppression list and the erasure log, in <data_dir>/inbox/privacy.db beside the inbox.

The list holds keyed hashes only: HMAC-SHA256 under COMMOPS_PRIVACY_KEY (from the environment, never
stored) of `kol:<id>` and of `email:<address lower-cased and trimmed>`. A sync, a detail fetch or a
webhook event whose KOL id or email hashes to a listed value is dropped before anything is written.
It fails closed: once the list holds an entry, a process without the key refuses to start.

The erasure log records each erasure (the subject's keyed hash, the OS user who ran it, when, which
stores, how many rows) and each suppression added or lifted: no personal data, kept for the DPO.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from file_modes import private_dir, private_sqlite_file
from privacy.subject import Subject, normalize_email
from resources.inbox.inbox import INBOX_FILE

PRIVACY_KEY_ENV = "COMMOPS_PRIVACY_KEY"
PRIVACY_FILE = INBOX_FILE.parent / "privacy.db"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS suppressed (hash TEXT PRIMARY KEY, kind TEXT NOT NULL, added_at TEXT NOT NULL, "
    "added_by TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS privacy_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, "
    "user TEXT NOT NULL, action TEXT NOT NULL, subject TEXT NOT NULL, stores TEXT NOT NULL, rows INTEGER NOT NULL)",
)


class PrivacyKeyMissing(RuntimeError):
    """The suppression list holds entries and COMMOPS_PRIVACY_KEY is not set: nothing may run."""


def privacy_key(required: bool = True) -> bytes | None:
    key = os.environ.get(PRIVACY_KEY_ENV, "")
    if not key:
        if required:
            raise PrivacyKeyMissing(f"{PRIVACY_KEY_ENV} is not set: the privacy commands need the key the "
                                    "suppression list is hashed with (kept outside the data directory)")
        return None
    return key.encode()


def keyed_hash(key: bytes, kind: str, value: str) -> str:
    value = normalize_email(value) if kind == "email" else value.strip()
    return hmac.new(key, f"{kind}:{value}".encode(), hashlib.sha256).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class PrivacyStore:
    """privacy.db of a data directory: the suppression list and the log."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / PRIVACY_FILE

    def _connect(self) -> sqlite3.Connection:
        private_dir(self.path.parent)
        private_sqlite_file(self.path)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        for statement in _SCHEMA:
            conn.execute(statement)
        return conn

    def listed(self) -> int:
        """How many hashes the list holds (0 when there is no list)."""
        if not self.path.exists():
            return 0
        with closing(self._connect()) as conn:
            return conn.execute("SELECT count(*) FROM suppressed").fetchone()[0]

    def suppress(self, key: bytes, subject: Subject) -> int:
        """Add the subject's ids and emails; returns how many were new."""
        user, at = getpass.getuser(), _now()
        with closing(self._connect()) as conn:
            added = 0
            for kind, value in _values(subject):
                added += conn.execute("INSERT OR IGNORE INTO suppressed VALUES (?, ?, ?, ?)",
                                      [keyed_hash(key, kind, value), kind, at, user]).rowcount
            return added

    def lift(self, key: bytes, subject: Subject) -> int:
        with closing(self._connect()) as conn:
            removed = sum(conn.execute("DELETE FROM suppressed WHERE hash = ?", [keyed_hash(key, kind, value)]).rowcount
                          for kind, value in _values(subject))
        self.log("lift", self.subject_hash(key, subject), {}, removed)
        return removed

    def is_listed(self, key: bytes, subject: Subject) -> bool:
        if not self.path.exists():
            return False
        with closing(self._connect()) as conn:
            return any(conn.execute("SELECT 1 FROM suppressed WHERE hash = ?", [keyed_hash(key, kind, value)]).fetchone()
                       for kind, value in _values(subject))

    def hashes(self) -> frozenset[str]:
        if not self.path.exists():
            return frozenset()
        with closing(self._connect()) as conn:
            return frozenset(row[0] for row in conn.execute("SELECT hash FROM suppressed"))

    @staticmethod
    def subject_hash(key: bytes, subject: Subject) -> str:
        """One keyed hash naming the request in the log (its ids and emails, sorted)."""
        return keyed_hash(key, "subject", json.dumps([subject.kol_ids, subject.emails]))

    def log(self, action: str, subject_hash: str, stores: dict[str, int], rows: int) -> int:
        """Record an action; returns its entry's number (for `update`)."""
        with closing(self._connect()) as conn:
            return conn.execute("INSERT INTO privacy_log (at, user, action, subject, stores, rows) VALUES (?, ?, ?, ?, ?, ?)",
                                [_now(), getpass.getuser(), action, subject_hash, json.dumps(stores, sort_keys=True),
                                 rows]).lastrowid

    def update(self, seq: int, action: str, stores: dict[str, int], rows: int) -> None:
        with closing(self._connect()) as conn:
            conn.execute("UPDATE privacy_log SET action = ?, stores = ?, rows = ? WHERE seq = ?",
                         [action, json.dumps(stores, sort_keys=True), rows, seq])

    def entries(self) -> list[tuple]:
        if not self.path.exists():
            return []
        with closing(self._connect()) as conn:
            return conn.execute("SELECT at, user, action, subject, stores, rows FROM privacy_log ORDER BY seq").fetchall()


def _values(subject: Subject) -> Iterable[tuple[str, str]]:
    yield from (("kol", kol_id) for kol_id in subject.kol_ids)
    yield from (("email", email) for email in subject.emails)


class Suppression:
    """What a sync or receiver checks rows and events against: loaded once per run (hashes only)."""

    def __init__(self, key: bytes | None, hashes: frozenset[str]) -> None:
        self.key, self.hashes = key, hashes

    @classmethod
    def load(cls, data_dir: str | Path) -> Suppression:
        """The data directory's list; PrivacyKeyMissing (one line) when it holds entries and the key is not set."""
        store = PrivacyStore(data_dir)
        hashes = store.hashes()
        if not hashes:
            return cls(None, frozenset())
        if not os.environ.get(PRIVACY_KEY_ENV):
            raise PrivacyKeyMissing(f"the suppression list {store.path} holds {len(hashes)} entr"
                                    f"{'y' if len(hashes) == 1 else 'ies'} and {PRIVACY_KEY_ENV} is not set: "
                                    "refusing to start (set the key the list was written with)")
        return cls(privacy_key(), hashes)

    def __bool__(self) -> bool:
        return bool(self.hashes)

    def suppressed(self, kol_id: str | None = None, email: str | None = None) -> bool:
        if not self.hashes or self.key is None:
            return False
        return bool((kol_id and keyed_hash(self.key, "kol", kol_id) in self.hashes)
                    or (email and email.strip() and keyed_hash(self.key, "email", email) in self.hashes))


def drop_suppressed(batch: pa.RecordBatch, suppression: Suppression) -> tuple[pa.RecordBatch, int]:
    """The batch without the rows of suppressed KOLs (by `id` and `email` where the batch has them)."""
    if not suppression or batch.num_rows == 0:
        return batch, 0
    names = batch.schema.names
    ids = batch.column("id").to_pylist() if "id" in names else [None] * batch.num_rows
    emails = batch.column("email").to_pylist() if "email" in names else [None] * batch.num_rows
    keep = [not suppression.suppressed(kol_id, email) for kol_id, email in zip(ids, emails, strict=True)]
    dropped = keep.count(False)
    return (batch.filter(pa.array(keep)) if dropped else batch), dropped


def event_suppressed(data: object, suppression: Suppression) -> bool:
    """Whether any string of a webhook event's data is a suppressed KOL id or email."""
    if not suppression:
        return False
    if isinstance(data, dict):
        return any(event_suppressed(value, suppression) for value in data.values())
    if isinstance(data, list):
        return any(event_suppressed(value, suppression) for value in data)
    return isinstance(data, str) and suppression.suppressed(kol_id=data, email=data if "@" in data else None)


class WatchedSuppression:
    """The list of a long-running process (the receiver): read again whenever privacy.db changes, so an
    erasure applies to events arriving after it without a restart. Fails closed as `Suppression.load`."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self._stamp: tuple | None = None
        self.current = Suppression.load(self.data_dir)
        self._stamp = self._files_stamp()

    def _files_stamp(self) -> tuple:
        path = self.data_dir / PRIVACY_FILE
        stamps = []
        for file in (path, path.with_name(path.name + "-wal")):
            try:
                stat = file.stat()
                stamps.append((stat.st_mtime_ns, stat.st_size))
            except FileNotFoundError:
                stamps.append(None)
        return tuple(stamps)

    def get(self) -> Suppression:
        stamp = self._files_stamp()
        if stamp != self._stamp:
            self.current, self._stamp = Suppression.load(self.data_dir), stamp
        return self.current
