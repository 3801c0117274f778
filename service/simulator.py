"""Activity simulator: random but plausible changes through the store functions the API uses.

    sim = Simulator(db_path, org_ids=None, per_second=2.0, random_seed=0)  # None: every organization
    sim.step()            # one random action, in its own transaction; returns its name or None
    sim.start(); ...; sim.stop()   # a background thread doing `per_second` steps per second

Because every action goes through service/store (kols, campaigns, signals, activity), each
change writes the same outbox events as the API would (kol.*, campaign.*, signal.*, event.*).
Off by default; the service starts it when ServiceSettings.simulate_per_second > 0
(`commops service run --simulate-per-second 2`), see install() below.

The choice of actions and rows is reproducible from random_seed for a given database
state; ids and timestamps come from the store functions (random ids, wall clock).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from commops_spec.constants import CAMPAIGN_TYPES, KOL_TIERS
from service import seed_vocab as V
from service.seed import product_refs, signal_fields
from service.settings import DEFAULT_KOL_LIMITS
from service.store import activity, campaigns, db, kols, signals

log = logging.getLogger(__name__)

# action -> relative weight: updates and engagement are frequent, archiving and cancelling rare
WEIGHTS = {
    "create_kol": 8,
    "update_kol": 10,
    "change_tier": 5,
    "archive_kol": 2,
    "ingest_signal": 8,
    "create_campaign": 3,
    "send_campaign": 3,
    "advance_campaign": 3,
    "record_open": 10,
    "record_click": 6,
    "create_event": 3,
    "update_event": 3,
    "cancel_event": 1,
    "add_attendee": 6,
    "update_rsvp": 5,
    "record_attendance": 3,
    "add_interaction": 6,
}

# Store errors that mean "this random choice does not apply now"; the step is skipped.
_NOT_APPLICABLE = (
    kols.DuplicateEmail, kols.KolLimitReached, kols.KolNotFound, campaigns.CampaignRejected,
    campaigns.CampaignNotFound, campaigns.InvalidTransition, activity.ActivityNotFound, activity.ActivityRejected,
)


class Simulator:
    def __init__(
        self,
        db_path: str | Path,
        org_ids: str | list[str] | None = None,
        per_second: float = 1.0,
        random_seed: int = 0,
        kol_limits: dict[str, int | None] | None = None,
    ):
        self.db_path = str(db_path)
        self.org_ids = [org_ids] if isinstance(org_ids, str) else list(org_ids) if org_ids else None
        self.per_second = per_second
        self.kol_limits = dict(DEFAULT_KOL_LIMITS if kol_limits is None else kol_limits)
        self.rng = random.Random(random_seed)
        self.performed: Counter[str] = Counter()
        self._conn: sqlite3.Connection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._actions: dict[str, Callable[[sqlite3.Connection, str], Any]] = {
            name: getattr(self, f"_{name}") for name in WEIGHTS
        }

    # ---- running ------------------------------------------------------------------------

    def step(self) -> str | None:
        """Do one random action for one organization; return the action's name, or None when
        the random choice did not apply (nothing to act on, a rule of the store refused it)."""
        conn = self._connection()
        org_ids = self.org_ids or [r[0] for r in conn.execute("SELECT id FROM organizations ORDER BY id")]
        if not org_ids:
            return None
        org_id = self.rng.choice(org_ids)
        action = self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        try:
            with db.transaction(conn):
                done = self._actions[action](conn, org_id)
        except _NOT_APPLICABLE as exc:
            log.debug("simulator: %s skipped for %s: %s", action, org_id, exc)
            return None
        if not done:
            return None
        self.performed[action] += 1
        return action

    def start(self) -> Simulator:
        if self.per_second <= 0:
            raise ValueError(f"per_second must be > 0 to start the simulator, got {self.per_second}")
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="activity-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 35.0) -> None:
        """Stop the background thread (waiting for a step in progress) and close the connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # a step is stuck waiting for the database: leave its connection be
                log.warning("simulator thread did not stop within %s s", timeout)
                return
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        interval = 1.0 / self.per_second
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            # steps are paced on a fixed schedule (the time a step takes is not added to the
            # interval); after a stall the schedule restarts instead of bursting to catch up
            next_at = max(next_at + interval, time.monotonic())
            try:
                self.step()
            except Exception:  # keep simulating; a failed step is logged, never fatal to the service
                log.exception("simulator step failed")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = db.connect(self.db_path)
        return self._conn

    def _pick(self, conn: sqlite3.Connection, table: str, where: str, params: tuple = (),
              columns: str = "*") -> sqlite3.Row | None:
        """A random row of `table` matching `where`: the first match at or after a random
        rowid (wrapping around), which avoids ORDER BY random() over large tables."""
        low, high = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
        if low is None:
            return None
        start = self.rng.randint(low, high)
        for op, direction in ((">=", "ASC"), ("<", "DESC")):
            row = conn.execute(
                f"SELECT {columns} FROM {table} WHERE rowid {op} ? AND {where} ORDER BY rowid {direction} LIMIT 1",
                (start, *params),
            ).fetchone()
            if row is not None:
                return row
        return None

    def _active_kol(self, conn: sqlite3.Connection, org_id: str) -> sqlite3.Row | None:
        return self._pick(conn, "kols", "org_id = ? AND is_archived = 0", (org_id,))

    # ---- KOLs ---------------------------------------------------------------------------

    def _create_kol(self, conn: sqlite3.Connection, org_id: str) -> bool:
        plan = conn.execute("SELECT plan FROM organizations WHERE id = ?", (org_id,)).fetchone()[0]
        fields = self._kol_fields()
        try:
            kols.create_kol(conn, org_id, fields, self.kol_limits.get(plan))
        except kols.DuplicateEmail:
            local, domain = fields["email"].split("@")
            fields["email"] = f"{local}{self.rng.randint(2, 9999)}@{domain}"
            kols.create_kol(conn, org_id, fields, self.kol_limits.get(plan))
        return True

    def _kol_fields(self) -> dict[str, Any]:
        rng = self.rng
        first, last = rng.choice(V.FIRST_NAMES), rng.choice(V.LAST_NAMES)
        inst_name, city, state, _postal, _street, country, domain, phone_prefix = rng.choice(V.INSTITUTIONS)
        specialty = rng.choice(list(V.SPECIALTIES))
        departments, expertise, research, role = V.SPECIALTIES[specialty]
        slug = _ascii(f"{first}.{last}").replace(" ", "")
        return {
            "full_name": f"{first} {last}",
            "specialties": [specialty],
            "title": role,
            "institution": inst_name,
            "department": rng.choice(departments),
            "expertise_areas": rng.sample(expertise, 2),
            "research_interests": [rng.choice(research)],
            "tier": rng.choices(KOL_TIERS, weights=(10, 30, 60))[0],
            "email": f"{slug}@{domain}",
            "phone": f"{phone_prefix} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
            "location": {"city": city, "state": state, "country": country},
            "tags": rng.sample(V.TAGS, rng.randint(0, 2)),
        }

    def _update_kol(self, conn: sqlite3.Connection, org_id: str) -> bool:
        kol = self._active_kol(conn, org_id)
        if kol is None:
            return False
        rng = self.rng
        kind = rng.choice(("title", "institution", "phone", "tags", "notes"))
        if kind == "title":
            changes: dict[str, Any] = {"title": rng.choice(("Professor of Medicine", "Associate Professor",
                                                            "Chief Medical Officer", "Head of Department"))}
        elif kind == "institution":
            inst_name, city, state, postal, street, country, _domain, _prefix = rng.choice(V.INSTITUTIONS)
            changes = {"institution": inst_name, "address": {"street": street, "city": city, "state": state,
                                                             "postal_code": postal, "country": country}}
        elif kind == "phone":
            changes = {"phone": f"+1 {rng.randint(200, 999)} {rng.randint(200, 999)} {rng.randint(1000, 9999)}"}
        elif kind == "tags":
            changes = {"tags": rng.sample(V.TAGS, rng.randint(1, 3))}
        else:
            changes = {"notes": rng.choice(V.NOTES)}
        kols.update_kol(conn, org_id, kol["id"], changes)
        return True

    def _change_tier(self, conn: sqlite3.Connection, org_id: str) -> bool:
        kol = self._active_kol(conn, org_id)
        if kol is None:
            return False
        kols.change_tier(conn, org_id, kol["id"], self.rng.choice([t for t in KOL_TIERS if t != kol["tier"]]))
        return True

    def _archive_kol(self, conn: sqlite3.Connection, org_id: str) -> bool:
        kol = self._active_kol(conn, org_id)
        if kol is None:
            return False
        kols.archive_kol(conn, org_id, kol["id"])
        return True

    # ---- signals ------------------------------------------------------------------------

    def _ingest_signal(self, conn: sqlite3.Connection, org_id: str) -> bool:
        level = self.rng.choice(("high", "critical")) if self.rng.random() < 0.25 else None
        fields = signal_fields(self.rng, product_refs(conn, org_id), level=level)
        signals.ingest_signal(conn, org_id, fields)
        return True

    # ---- campaigns ----------------------------------------------------------------------

    def _create_campaign(self, conn: sqlite3.Connection, org_id: str) -> bool:
        members = [self._pick(conn, "kols", "org_id = ? AND is_archived = 0 AND email_lower IS NOT NULL",
                              (org_id,), "id") for _ in range(self.rng.randint(3, 25))]
        kol_ids = list(dict.fromkeys(m["id"] for m in members if m is not None))
        if not kol_ids:
            return False
        topic = self.rng.choice(V.EVENT_TOPICS)
        ctype = self.rng.choice(CAMPAIGN_TYPES)
        campaigns.create_campaign(conn, org_id, {
            "name": f"{topic[0].upper() + topic[1:]} – {ctype.replace('_', ' ')}",
            "description": f"Simulated {ctype.replace('_', ' ')} campaign on {topic}.",
            "type": ctype,
            "audience": {"kol_ids": kol_ids},
            "email": {"subject": f"{{{{first_name}}}}, news on {topic}",
                      "body_html": f"<p>Dear {{{{full_name}}}},</p><p>Latest evidence on {topic}.</p>",
                      "from_name": self.rng.choice(V.FROM_NAMES)},
            "schedule": {"type": "immediate"},
        })
        return True

    def _send_campaign(self, conn: sqlite3.Connection, org_id: str) -> bool:
        draft = self._pick(conn, "campaigns", "org_id = ? AND status = 'draft'", (org_id,), "id")
        if draft is None:
            return False
        campaigns.set_campaign_status(conn, org_id, draft["id"], "active")
        return True

    def _advance_campaign(self, conn: sqlite3.Connection, org_id: str) -> bool:
        campaign = self._pick(conn, "campaigns", "org_id = ? AND status IN ('active', 'paused')", (org_id,),
                              "id, status")
        if campaign is None:
            return False
        target = ("paused" if self.rng.random() < 0.4 else "completed") if campaign["status"] == "active" else (
            "active" if self.rng.random() < 0.6 else "completed")
        campaigns.set_campaign_status(conn, org_id, campaign["id"], target)
        return True

    def _sent_recipient(self, conn: sqlite3.Connection, org_id: str, condition: str) -> sqlite3.Row | None:
        """A delivered recipient of a random sent campaign for which `condition` holds."""
        campaign = self._pick(conn, "campaigns", "org_id = ? AND status IN ('active', 'completed')", (org_id,), "id")
        if campaign is None:
            return None
        for offset in (self.rng.randint(0, 5), 0):
            row = conn.execute(
                f"SELECT campaign_id, email_lower FROM campaign_recipients WHERE campaign_id = ? "
                f"AND delivered_at IS NOT NULL AND {condition} ORDER BY email_lower LIMIT 1 OFFSET ?",
                (campaign["id"], offset),
            ).fetchone()
            if row is not None:
                return row
        return None

    def _record_open(self, conn: sqlite3.Connection, org_id: str) -> bool:
        recipient = self._sent_recipient(conn, org_id, "opened_at IS NULL")
        return recipient is not None and campaigns.record_open(
            conn, org_id, recipient["campaign_id"], recipient["email_lower"])

    def _record_click(self, conn: sqlite3.Connection, org_id: str) -> bool:
        recipient = self._sent_recipient(conn, org_id, "clicked_at IS NULL")
        return recipient is not None and campaigns.record_click(
            conn, org_id, recipient["campaign_id"], recipient["email_lower"])

    # ---- events -------------------------------------------------------------------------

    def _create_event(self, conn: sqlite3.Connection, org_id: str) -> bool:
        rng = self.rng
        kind = rng.choice(activity.EVENT_TYPES)
        topic = rng.choice(V.EVENT_TOPICS)
        _name, city, _state, _postal, _street, country, _domain, _prefix = rng.choice(V.INSTITUTIONS)
        day = (datetime.now(UTC) + timedelta(days=rng.randint(7, 180))).date()
        if kind == "congress":
            congress, city, country = rng.choice(V.CONGRESSES)
            name = f"{congress} {day.year}"
        else:
            name = f"{kind.replace('_', ' ').title()}: {topic}"
        activity.create_event(conn, org_id, {"name": name, "type": kind, "date": day.isoformat(),
                                             "city": None if kind == "webinar" else city,
                                             "country": None if kind == "webinar" else country})
        return True

    def _scheduled_event(self, conn: sqlite3.Connection, org_id: str) -> sqlite3.Row | None:
        return self._pick(conn, "events", "org_id = ? AND status = 'scheduled'", (org_id,))

    def _update_event(self, conn: sqlite3.Connection, org_id: str) -> bool:
        event = self._scheduled_event(conn, org_id)
        if event is None:
            return False
        if event["date"] < datetime.now(UTC).date().isoformat():
            activity.update_event(conn, org_id, event["id"], {"status": "completed"})
        else:
            moved = datetime.fromisoformat(event["date"]) + timedelta(days=self.rng.choice((-7, -1, 1, 7, 14)))
            activity.update_event(conn, org_id, event["id"], {"date": moved.date().isoformat()})
        return True

    def _cancel_event(self, conn: sqlite3.Connection, org_id: str) -> bool:
        event = self._scheduled_event(conn, org_id)
        if event is None:
            return False
        activity.cancel_event(conn, org_id, event["id"])
        return True

    def _add_attendee(self, conn: sqlite3.Connection, org_id: str) -> bool:
        event, kol = self._scheduled_event(conn, org_id), self._active_kol(conn, org_id)
        if event is None or kol is None:
            return False
        activity.add_attendee(conn, org_id, event["id"], kol["id"], role=self.rng.choice(activity.ATTENDEE_ROLES))
        return True

    def _update_rsvp(self, conn: sqlite3.Connection, org_id: str) -> bool:
        attendee = self._pick(
            conn, "event_attendees",
            "org_id = ? AND attended = 0 "
            "AND event_id IN (SELECT id FROM events WHERE org_id = ? AND status = 'scheduled')",
            (org_id, org_id))
        if attendee is None:
            return False
        status = self.rng.choice([s for s in activity.RSVP_STATUSES if s != attendee["rsvp_status"]])
        activity.update_rsvp(conn, org_id, attendee["event_id"], attendee["kol_id"], status)
        return True

    def _record_attendance(self, conn: sqlite3.Connection, org_id: str) -> bool:
        attendee = self._pick(
            conn, "event_attendees",
            "org_id = ? AND attended = 0 AND rsvp_status IN ('accepted', 'tentative') "
            "AND event_id IN (SELECT id FROM events WHERE org_id = ? AND status != 'cancelled')",
            (org_id, org_id))
        if attendee is None:
            return False
        activity.record_attendance(conn, org_id, attendee["event_id"], attendee["kol_id"], True)
        return True

    def _add_interaction(self, conn: sqlite3.Connection, org_id: str) -> bool:
        kol = self._active_kol(conn, org_id)
        if kol is None:
            return False
        kind = self.rng.choice(activity.INTERACTION_TYPES)
        activity.add_interaction(conn, org_id, kol["id"], kind, summary=f"Simulated {kind.replace('_', ' ')}.",
                                 responded=self.rng.random() < 0.6)
        return True


def _ascii(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower().replace("'", "")


def install(app: Any, settings: Any) -> None:
    """Service plugin hook (service/app.py): run the simulator for every organization while the
    service runs, when settings.simulate_per_second > 0."""
    if settings.simulate_per_second <= 0:
        return
    simulator = Simulator(settings.db, None, settings.simulate_per_second,
                          random_seed=settings.simulate_seed, kol_limits=settings.kol_limits)
    app.state.simulator = simulator
    app.state.on_startup.append(lambda _app: simulator.start())
    app.state.on_shutdown.append(lambda _app: simulator.stop())
