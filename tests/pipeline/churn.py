"""Continuous change while a sync pages, and the guarantee a sync must meet under it (no tests here).

`Churn` creates and archives KOLs at steady rates on a background thread, through the server's own
mutation paths, and keeps a change log: every change with the moments before it was made and after it
was committed (the test's clock, which the sync shares). `assert_guarantee` compares the warehouse with
that log over the window the sync's listing reports (`listing_started_at` .. `listing_ended_at`):

- a KOL present from the walk's start to its end is in the warehouse, not archived;
- a KOL archived before the walk started is in the warehouse, archived;
- a KOL created or archived during the walk is in a state it held at some moment of the walk (absent
  only if it was created during it), or named in flux by the run.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Change:
    kind: str  # "created" or "archived"
    kol_id: str
    not_before: datetime  # the change was made after this moment ...
    not_after: datetime  # ... and committed before this one


@dataclass
class Churn:
    """Creates `creations_per_second` and archives `archivals_per_second` KOLs until stopped."""

    create: Callable[[int], list[str]]
    archive: Callable[[list[str]], None]
    active: list[str]  # the KOLs active when it starts (archival candidates)
    creations_per_second: float
    archivals_per_second: float
    seed: int = 0
    log: list[Change] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)
        self._rng = random.Random(self.seed)
        self.active = list(self.active)

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def count(self, kind: str) -> int:
        return sum(1 for change in self.log if change.kind == kind)

    def _run(self) -> None:
        rates = {"created": self.creations_per_second, "archived": self.archivals_per_second}
        due = {kind: time.monotonic() for kind, rate in rates.items() if rate > 0}
        while not self._stop.is_set():
            kind = min(due, key=due.get)
            self._stop.wait(max(0.0, due[kind] - time.monotonic()))
            if self._stop.is_set():
                return
            due[kind] += 1 / rates[kind]
            before = datetime.now(UTC)
            if kind == "created":
                (kol_id,) = self.create(1)
                self.active.append(kol_id)
            else:
                kol_id = self.active.pop(self._rng.randrange(len(self.active)))
                self.archive([kol_id])
            self.log.append(Change(kind, kol_id, before, datetime.now(UTC)))


def assert_guarantee(
    rows: dict[str, dict[str, Any]],
    churn: Churn,
    initially_active: set[str],
    initially_archived: set[str],
    metadata: dict[str, Any],
) -> dict[str, int]:
    """The guarantee over the listing's window; returns how many KOLs fell in each class."""
    start = datetime.fromisoformat(metadata["listing_started_at"])
    end = datetime.fromisoformat(metadata["listing_ended_at"])
    in_flux = set(metadata.get("rows_in_flux_ids") or [])
    created = {c.kol_id: c for c in churn.log if c.kind == "created"}
    archived = {c.kol_id: c for c in churn.log if c.kind == "archived"}
    counts = {"present_throughout": 0, "archived_before": 0, "changed_during": 0, "after": 0}
    problems: list[str] = []
    for kol_id in initially_active | initially_archived | set(created):
        made, gone = created.get(kol_id), archived.get(kol_id)
        existed_at_start = kol_id in initially_active or kol_id in initially_archived or made.not_after < start
        archived_at_start = kol_id in initially_archived or (gone is not None and gone.not_after < start)
        archived_by_end = archived_at_start or (gone is not None and gone.not_before <= end)
        row = rows.get(kol_id)
        if made is not None and made.not_before > end:
            counts["after"] += 1
        elif archived_at_start:
            counts["archived_before"] += 1
            if row is None or row["is_archived"] is not True:
                problems.append(f"{kol_id} archived before the walk: {'missing' if row is None else 'not archived'}")
        elif existed_at_start and not archived_by_end:
            counts["present_throughout"] += 1
            if row is None or row["is_archived"] is not False:
                problems.append(f"{kol_id} present throughout the walk: {'missing' if row is None else 'archived'}")
        else:
            counts["changed_during"] += 1
            held = {"active"} | ({"archived"} if archived_by_end else set()) | ({"absent"} if not existed_at_start else set())
            state = "absent" if row is None else ("archived" if row["is_archived"] else "active")
            if state not in held and kol_id not in in_flux:
                problems.append(f"{kol_id} changed during the walk: {state}, held {sorted(held)}, not named in flux")
    assert not problems, (
        f"{len(problems)} KOL(s) break the guarantee: {problems[:5]} ({counts}); the run said: {metadata.get('listing')}"
    )
    return counts
