"""The inbox: every webhook event the receiver acknowledged, in a SQLite file or in Postgres.

The receiver writes it while Dagster (the sensor and the incremental job) reads and marks it from
other processes. Two stores, one API (resources/inbox/stores.py holds what differs):
- a SQLite file, the default: WAL lets readers run beside one writer and several processes of one
  host write in turn; `synchronous=FULL` makes a commit durable before the receiver answers 2xx;
- Postgres, when COMMOPS_INBOX_URL=postgresql://... : receivers and Dagster processes on several
  hosts share it (SQLite's WAL does not work across hosts).

    with open_inbox(data_dir) as inbox:                 # COMMOPS_INBOX_URL, else data_dir/inbox/webhooks.db
        batch = inbox.claim(ids, claimer=run_id)        # the events this run may apply (held by no other)
        inbox.mark_applied([e.id for e in batch], applied_at)

An event is identified by its envelope `id` (`wh_evt_...`, the same on every retry and redelivery):
a second delivery of an id, to this receiver or another, is acknowledged and not stored again
(`ON CONFLICT (id) DO NOTHING`).

An event's life: pending (not applied, not quarantined) until applied. A run applies only the
events it claimed (`claim`): a lease (`claimed_by`, `claimed_until`) taken in the transaction that
reads them, which no other claimer can take while it lasts, so no event is applied by two runs at
once; applying, failing or quarantining an event ends its claim, and a claimer that died without a
word loses it when the lease lapses. A failed application (`mark_failed`) raises `attempts` and
holds the event back for a while (`retry_after`: 30 s, 2 min, 8 min, 32 min, at most an hour); at
`max_attempts` failures, or at once for an event that can never be applied (`quarantine`), it is
quarantined: set aside with its error, so the events behind it go on. `retry` puts events back.

Timestamps are stored as text in commops_spec's fixed-width form (`2026-05-01T12:00:00.000000Z`), so
they compare as strings on both stores; "now" is the caller's clock (hosts kept in time by NTP: leases
and waits are minutes long).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from commops_spec.constants import EVENTS
from commops_spec.timestamps import format_timestamp, utc_now
from resources.inbox.envelope import Envelope, parse_envelope
from resources.inbox.stores import INBOX_URL_ENV, OPEN, InboxUnreachable, is_postgres_url, open_store
from resources.postgres_urls import redacted

INBOX_FILE = Path("inbox") / "webhooks.db"  # under the data directory (COMMOPS_DATA_DIR)
DEFAULT_MAX_ATTEMPTS = 5  # failed applications before an event is quarantined (COMMOPS_EVENTS_MAX_ATTEMPTS)
FIRST_RETRY_DELAY = timedelta(seconds=30)
RETRY_DELAY_FACTOR = 4  # 30 s, 2 min, 8 min, 32 min: an API outage of minutes quarantines nothing
MAX_RETRY_DELAY = timedelta(hours=1)
# How long a claim lasts without renewal: far above a run's apply step (renewed before its warehouse
# write), short enough that the events of a run killed without a word move on within minutes.
CLAIM_LEASE = timedelta(minutes=15)
_KNOWN_EVENTS = frozenset(EVENTS)
_CHUNK = 500  # ids per IN (...) list

_COLUMNS = (
    "seq, id, event, created_at, organization_id, received_at, payload, known_event, applied_at, attempts, "
    "last_error, quarantined_at, retry_after, claimed_by, claimed_until"
)
_UNCLAIMED = "(claimed_until IS NULL OR claimed_until <= ?)"  # no claim, or a lapsed one
_FREE_FOR = "(claimed_until IS NULL OR claimed_until <= ? OR claimed_by = ?)"  # ... or the caller's own
_RELEASE = "claimed_by = NULL, claimed_until = NULL"

__all__ = ["CLAIM_LEASE", "DEFAULT_MAX_ATTEMPTS", "INBOX_URL_ENV", "Inbox", "InboxEvent", "InboxUnreachable",
           "describe_location", "inbox_location", "inbox_path", "open_inbox", "retry_delay"]


def inbox_path(data_dir: str | Path) -> Path:
    """The SQLite inbox of a data directory: the one place its location is defined (receiver and pipeline)."""
    return Path(data_dir).expanduser().resolve() / INBOX_FILE


def inbox_location(data_dir: str | Path, url: str | None = None) -> str | Path:
    """Where the inbox is: `url`, else COMMOPS_INBOX_URL (Postgres), else the data directory's file."""
    url = url if url is not None else os.environ.get(INBOX_URL_ENV) or None
    if url and not is_postgres_url(url):
        raise InboxUnreachable(f"{INBOX_URL_ENV} must be a postgresql://USER:PASSWORD@HOST:PORT/DATABASE URL "
                               f"(got one starting {url.split('://')[0]!r}); unset it for the SQLite file")
    return url or inbox_path(data_dir)


def open_inbox(data_dir: str | Path, url: str | None = None, **options: object) -> Inbox:
    """The inbox every user of a data directory shares (see inbox_location); options as Inbox's."""
    return Inbox(inbox_location(data_dir, url), **options)  # type: ignore[arg-type]


def describe_location(location: str | Path) -> str:
    """The location as it may be logged: a file path, or a Postgres URL without credentials."""
    return redacted(str(location)) if is_postgres_url(location) else str(location)


def retry_delay(attempts: int) -> timedelta:
    """How long an event that failed `attempts` times waits before it is taken again."""
    return min(FIRST_RETRY_DELAY * RETRY_DELAY_FACTOR ** max(attempts - 1, 0), MAX_RETRY_DELAY)


@dataclass(frozen=True)
class InboxEvent:
    """One stored event. `payload` is the request body exactly as received (the signed bytes)."""

    seq: int  # order of first receipt
    id: str  # the envelope id, wh_evt_...
    event: str  # event name, e.g. kol.updated
    created_at: str  # the envelope's created_at, as sent
    organization_id: str | None
    received_at: str  # when the receiver committed it (commops_spec.timestamps form)
    payload: bytes
    known_event: bool  # False: an event name outside part 6 of the spec (stored, flagged)
    applied_at: str | None  # None while pending
    attempts: int  # failed applications so far
    last_error: str | None
    quarantined_at: str | None = None  # set aside: not taken until `retry`
    retry_after: str | None = None  # after a failure: not taken before this time
    claimed_by: str | None = None  # the run applying it now (until claimed_until)
    claimed_until: str | None = None

    def envelope(self) -> Envelope:
        """The parsed payload; InvalidEnvelope when it can never be an event (stored by an older receiver)."""
        return parse_envelope(self.payload)

    @classmethod
    def _from_row(cls, row: tuple) -> InboxEvent:
        seq, id_, event, created_at, org, received_at, payload, known, *rest = row
        return cls(seq, id_, event, created_at, org, received_at, bytes(payload), bool(known), *rest)


class Inbox:
    """The inbox at `location`: a SQLite file path, or a postgresql:// URL (created with its schema when
    missing, brought up to date when older). InboxUnreachable, naming it, when it cannot be opened.

    One Inbox object may be shared by threads: each thread gets its own connection. Any number of
    processes may open the same inbox. `with Inbox(...) as inbox:` closes this thread's connection.
    """

    def __init__(self, location: str | Path, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 claim_lease: timedelta = CLAIM_LEASE) -> None:
        self.max_attempts = max_attempts
        self.claim_lease = claim_lease
        self._store = open_store(location)
        self.where = self._store.where  # for logs and messages: never a password

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def add(self, raw: bytes, envelope: Envelope) -> bool:
        """Store one event and commit it durably. False when its id was already stored."""
        return self.add_many([(raw, envelope)])[0]

    def add_many(self, items: Sequence[tuple[bytes, Envelope]]) -> list[bool]:
        """Store several events in one durable commit (the receiver's group commit).

        Returns, per item, True when it was new and False when its id was already stored (earlier, by
        any receiver, or earlier in `items`).
        """
        received_at = utc_now()
        # In id order: on Postgres an insert waits for another receiver's uncommitted insert of the same
        # id, so two receivers inserting overlapping batches in opposite orders would deadlock.
        order = sorted(range(len(items)), key=lambda n: items[n][1].id)  # stable: the first of a repeated id wins
        new = [False] * len(items)
        with self._store.transaction() as cursor:
            for n in order:
                raw, e = items[n]
                new[n] = cursor.execute(
                    "INSERT INTO {events} (id, event, created_at, organization_id, received_at, payload, known_event)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    (e.id, e.event, e.created_at_text, e.organization_id, received_at, raw, e.event in _KNOWN_EVENTS),
                ).rowcount == 1
        return new

    def claim(self, ids: Iterable[str], claimer: str) -> list[InboxEvent]:
        """Claim the pending events among `ids` for `claimer` (a run id) and return them, by `seq`.

        In one transaction: the events not applied, not quarantined and held by no other claimer (no
        claim, a lapsed one, or `claimer`'s own) are locked (rows another transaction is claiming are
        passed by) and given a lease of `claim_lease`. Two claimers at once get disjoint events;
        claiming again renews the lease and returns what `claimer` still holds.
        """
        now = datetime.now(UTC)
        stamp, until = format_timestamp(now), format_timestamp(now + self.claim_lease)
        claimed: list[InboxEvent] = []
        with self._store.transaction() as cursor:
            for chunk in _chunks(list(dict.fromkeys(ids))):
                rows = cursor.execute(
                    f"SELECT {_COLUMNS} FROM {{events}} WHERE id IN ({_marks(chunk)}) AND {OPEN} AND {_FREE_FOR}"
                    f" ORDER BY seq{self._store.skip_locked}",
                    (*chunk, stamp, claimer),
                ).fetchall()
                for row in rows:
                    cursor.execute("UPDATE {events} SET claimed_by = ?, claimed_until = ? WHERE id = ?",
                                   (claimer, until, row[1]))
                claimed += [InboxEvent._from_row(row[:-2] + (claimer, until)) for row in rows]
        return sorted(claimed, key=lambda e: e.seq)

    def mark_applied(self, ids: Iterable[str], applied_at: str | None = None) -> int:
        """Mark events applied (no longer pending, claim ended); returns how many rows changed.

        `applied_at` defaults to now; events already applied keep their first time.
        """
        stamp = applied_at or utc_now()
        with self._store.transaction() as cursor:
            return sum(
                cursor.execute(
                    f"UPDATE {{events}} SET applied_at = ?, quarantined_at = NULL, retry_after = NULL, {_RELEASE}"
                    " WHERE id = ? AND applied_at IS NULL",
                    (stamp, i),
                ).rowcount
                for i in ids
            )

    def mark_failed(self, ids: Iterable[str], error: str, *, run_id: str | None = None) -> list[str]:
        """Record a failed application of pending events: `attempts` + 1, `last_error`, and a wait
        before the next attempt (`retry_delay`); an event reaching `max_attempts` is quarantined. Its
        claim ends.

        `run_id` counts one failure per run however many steps report it (a step's hook, then the
        run's failure sensor); events another run holds now are left alone (not this run's to fail).
        Returns the ids this call quarantined.
        """
        now = datetime.now(UTC)
        stamp = format_timestamp(now)
        quarantined: list[str] = []
        with self._store.transaction() as cursor:
            for event_id in ids:
                row = cursor.execute(
                    f"SELECT attempts, failed_by FROM {{events}} WHERE id = ? AND {OPEN} AND {_FREE_FOR}"
                    f"{self._store.lock_rows}",
                    (event_id, stamp, run_id),
                ).fetchone()
                if row is None or (run_id is not None and row[1] == run_id):
                    continue
                attempts = row[0] + 1
                if attempts >= self.max_attempts:
                    quarantined_at, retry_after = stamp, None
                    quarantined.append(event_id)
                else:
                    quarantined_at, retry_after = None, format_timestamp(now + retry_delay(attempts))
                cursor.execute(
                    "UPDATE {events} SET attempts = ?, last_error = ?, failed_by = ?, quarantined_at = ?,"
                    f" retry_after = ?, {_RELEASE} WHERE id = ?",
                    (attempts, error, run_id, quarantined_at, retry_after, event_id),
                )
        return quarantined

    def quarantine(self, ids: Iterable[str], error: str, *, claimer: str | None = None) -> int:
        """Set pending events aside at once (they can never be applied): attempts + 1, `last_error`.
        Events held by a claimer other than `claimer` are left to it."""
        stamp = utc_now()
        with self._store.transaction() as cursor:
            return sum(
                cursor.execute(
                    "UPDATE {events} SET attempts = attempts + 1, last_error = ?, quarantined_at = ?, retry_after = NULL,"
                    f" {_RELEASE} WHERE id = ? AND {OPEN} AND {_FREE_FOR}",
                    (error, stamp, i, stamp, claimer),
                ).rowcount
                for i in ids
            )

    def retry(self, ids: Iterable[str] | None = None) -> list[str]:
        """Put quarantined or failing events back to pending now (`ids`; None: every one of them):
        attempts reset, no wait; `last_error` is kept for history. Returns the ids put back."""
        unsettled = "applied_at IS NULL AND (quarantined_at IS NOT NULL OR attempts > 0)"
        with self._store.transaction() as cursor:
            if ids is None:
                chosen = [row[0] for row in cursor.execute(f"SELECT id FROM {{events}} WHERE {unsettled} ORDER BY seq")
                          .fetchall()]
            else:
                chosen = [
                    row[0] for chunk in _chunks(list(dict.fromkeys(ids)))
                    for row in cursor.execute(
                        f"SELECT id FROM {{events}} WHERE {unsettled} AND id IN ({_marks(chunk)}) ORDER BY seq", chunk
                    ).fetchall()
                ]
            for event_id in chosen:
                cursor.execute(
                    "UPDATE {events} SET quarantined_at = NULL, retry_after = NULL, attempts = 0, failed_by = NULL"
                    " WHERE id = ?",
                    (event_id,),
                )
        return chosen

    def erase_matching(self, regex: str) -> int:
        """Delete every event whose payload (lower-cased) matches `regex`, and remove their bytes as the
        store can (stores.py `purge`; on every call, so a call killed before that step is finished by the
        next). Returns how many events went."""
        return self._store.purge(self._store.payload_matches, (regex,), compact=True)

    def expire_applied(self, received_before: str) -> int:
        """Delete the applied events received before `received_before` (a stamp of commops_spec's form);
        pending and quarantined ones stay. Returns how many went."""
        return self._store.purge("applied_at IS NOT NULL AND received_at < ?", (received_before,), compact=False)

    # ------------------------------------------------------------ reading

    def count_matching(self, regex: str) -> int:
        """How many events' payloads (lower-cased) match `regex`."""
        [(count,)] = self._store.read(f"SELECT count(*) FROM {{events}} WHERE {self._store.payload_matches}", (regex,))
        return int(count)

    def pending(self, limit: int | None = None) -> list[InboxEvent]:
        """Events ready to apply: not applied, not quarantined, not waiting after a failure, not held by
        a run (claimed); oldest receipt first (by `seq`), at most `limit`."""
        now = utc_now()
        return self._select(f"{OPEN} AND (retry_after IS NULL OR retry_after <= ?) AND {_UNCLAIMED}", (now, now), limit)

    def quarantined(self, limit: int | None = None) -> list[InboxEvent]:
        """Quarantined events, oldest receipt first, at most `limit`."""
        return self._select("quarantined_at IS NOT NULL AND applied_at IS NULL", (), limit)

    def failing(self, limit: int | None = None) -> list[InboxEvent]:
        """Pending events that failed at least once (waiting or ready to be tried again), oldest first."""
        return self._select(f"{OPEN} AND attempts > 0", (), limit)

    def get(self, ids: Iterable[str]) -> list[InboxEvent]:
        """The stored events among `ids`, by `seq`; unknown ids are left out."""
        found = [
            InboxEvent._from_row(row)
            for chunk in _chunks(list(dict.fromkeys(ids)))
            for row in self._store.read(f"SELECT {_COLUMNS} FROM {{events}} WHERE id IN ({_marks(chunk)})", chunk)
        ]
        return sorted(found, key=lambda e: e.seq)

    def counts(self) -> dict[str, int]:
        """{"total", "pending" (not applied, not quarantined), "backing_off" (pending, waiting after a
        failure), "failing" (pending with attempts > 0), "claimed" (pending, held by a run now),
        "quarantined", "applied", "unknown_event"}."""
        now = utc_now()
        [row] = self._store.read(
            "SELECT count(*),"
            f" count(*) FILTER (WHERE {OPEN}),"
            f" count(*) FILTER (WHERE {OPEN} AND retry_after > ?),"
            f" count(*) FILTER (WHERE {OPEN} AND attempts > 0),"
            f" count(*) FILTER (WHERE {OPEN} AND claimed_until > ?),"
            " count(*) FILTER (WHERE applied_at IS NULL AND quarantined_at IS NOT NULL),"
            " count(*) FILTER (WHERE applied_at IS NOT NULL),"
            " count(*) FILTER (WHERE NOT known_event)"
            " FROM {events}",
            (now, now),
        )
        names = ("total", "pending", "backing_off", "failing", "claimed", "quarantined", "applied", "unknown_event")
        return dict(zip(names, row, strict=True))

    def by_organization(self) -> list[tuple[str | None, int, str | None, int, str | None]]:
        """Per organization_id: (organization_id, pending, received_at of the oldest pending, quarantined,
        received_at of the newest event), as the alerts and `commops status` judge the inbox."""
        return [tuple(row) for row in self._store.read(
            f"SELECT organization_id, count(*) FILTER (WHERE {OPEN}), min(received_at) FILTER (WHERE {OPEN}),"
            " count(*) FILTER (WHERE applied_at IS NULL AND quarantined_at IS NOT NULL), max(received_at)"
            " FROM {events} GROUP BY organization_id ORDER BY organization_id")]

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's Inbox is collected)."""
        self._store.close()

    # ------------------------------------------------------------ store

    def _select(self, where: str, params: tuple, limit: int | None) -> list[InboxEvent]:
        sql = f"SELECT {_COLUMNS} FROM {{events}} WHERE {where} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [InboxEvent._from_row(row) for row in self._store.read(sql, params)]


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    return (ids[start : start + _CHUNK] for start in range(0, len(ids), _CHUNK))


def _marks(chunk: list[str]) -> str:
    return ",".join("?" * len(chunk))
