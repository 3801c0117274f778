"""Events (meetings, congresses), their attendees, interactions and publications.

The spec has no endpoints for these (4.9 lists them as a gap) but names the event.*
webhook events and the scopes. These writes are what the activity simulator (and any
later endpoint) calls. Each function runs inside the caller's db.transaction(conn),
emits its outbox event there, and recomputes the derived fields of the KOLs whose
inputs changed (metrics.refresh_kol_metrics, which moves their updated_at).

Event payloads (`data`): the event object of event_shape() for event.created,
event.updated (plus `changed`: the field names) and event.cancelled; the attendee
object of attendee_shape() (plus the event's id, name and date under `event`) for
event.attendee_added and event.rsvp_updated (plus `previous_rsvp_status`).
Attendance, interactions and publications have no event name in the spec and emit none.
"""

from __future__ import annotations

import sqlite3
from datetime import date
from typing import Any

from service.store import metrics, outbox
from service.store.db import new_id, now_iso

EVENT_TYPES = ("congress", "advisory_board", "webinar", "dinner_meeting", "workshop")
EVENT_STATUSES = ("scheduled", "completed", "cancelled")
ATTENDEE_ROLES = ("speaker", "moderator", "attendee", "panelist", "chair")
RSVP_STATUSES = ("invited", "accepted", "declined", "tentative")
INTERACTION_TYPES = ("meeting", "call", "email", "congress_visit", "advisory_input")

_EVENT_FIELDS = ("name", "type", "date", "city", "country", "status")


class ActivityNotFound(LookupError):
    """An event, attendee or KOL id unknown in the organization."""


class ActivityRejected(ValueError):
    """A well-formed change the current state does not allow (e.g. changing a cancelled event)."""


def event_shape(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "type": row["type"],
        "date": row["date"],
        "location": {"city": row["city"], "country": row["country"]},
        "status": row["status"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def attendee_shape(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "event_id": row["event_id"],
        "kol_id": row["kol_id"],
        "role": row["role"],
        "rsvp_status": row["rsvp_status"],
        "attended": bool(row["attended"]),
        "updated_at": row["updated_at"],
    }


def get_event(conn: sqlite3.Connection, org_id: str, event_id: str) -> dict[str, Any]:
    return event_shape(_event_row(conn, org_id, event_id))


def create_event(conn: sqlite3.Connection, org_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Insert an event (name, type, date YYYY-MM-DD, optional city, country); status scheduled.
    Emits event.created."""
    _check_event_fields(fields, required=("name", "type", "date"))
    status = fields.get("status", "scheduled")
    if status == "cancelled":
        raise ActivityRejected("a new event cannot be cancelled; create it, then cancel it")
    now = now_iso()
    event_id = new_id("evt_")
    conn.execute(
        "INSERT INTO events (id, org_id, name, type, date, city, country, status, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (event_id, org_id, fields["name"], fields["type"], fields["date"], fields.get("city"),
         fields.get("country"), status, now, now),
    )
    event = get_event(conn, org_id, event_id)
    outbox.emit(conn, org_id, "event.created", event)
    return event


def update_event(conn: sqlite3.Connection, org_id: str, event_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change name, type, date, city, country or status (scheduled <-> completed; use
    cancel_event to cancel). Emits event.updated with `changed` when something changed."""
    row = _event_row(conn, org_id, event_id)
    if row["status"] == "cancelled":
        raise ActivityRejected(f"event {event_id} is cancelled and can no longer change")
    if changes.get("status") == "cancelled":
        raise ActivityRejected("use cancel_event to cancel an event")
    _check_event_fields(changes, required=())
    changed = [name for name in _EVENT_FIELDS if name in changes and changes[name] != row[name]]
    if not changed:
        return event_shape(row)
    now = now_iso()
    assignments = ", ".join(f"{name} = ?" for name in changed)
    conn.execute(f"UPDATE events SET {assignments}, updated_at = ? WHERE id = ?",
                 [*(changes[name] for name in changed), now, event_id])
    if "date" in changed:  # attended events feed last_interaction
        metrics.refresh_kol_metrics(conn, _attended_kol_ids(conn, event_id), now=now)
    event = get_event(conn, org_id, event_id)
    outbox.emit(conn, org_id, "event.updated", {**event, "changed": changed})
    return event


def cancel_event(conn: sqlite3.Connection, org_id: str, event_id: str) -> dict[str, Any]:
    """Cancel a scheduled event; attendance recorded for it is withdrawn (a cancelled event
    did not take place). Emits event.cancelled. Cancelling a cancelled event changes nothing."""
    row = _event_row(conn, org_id, event_id)
    if row["status"] == "cancelled":
        return event_shape(row)
    if row["status"] == "completed":
        raise ActivityRejected(f"event {event_id} is completed and cannot be cancelled")
    now = now_iso()
    attended = _attended_kol_ids(conn, event_id)
    conn.execute("UPDATE events SET status = 'cancelled', updated_at = ? WHERE id = ?", (now, event_id))
    conn.execute("UPDATE event_attendees SET attended = 0, updated_at = ? WHERE event_id = ? AND attended = 1",
                 (now, event_id))
    metrics.refresh_kol_metrics(conn, attended, now=now)
    event = get_event(conn, org_id, event_id)
    outbox.emit(conn, org_id, "event.cancelled", event)
    return event


def add_attendee(conn: sqlite3.Connection, org_id: str, event_id: str, kol_id: str,
                 role: str = "attendee", rsvp_status: str = "invited") -> dict[str, Any]:
    """Invite an active KOL of the organization to an event; emits event.attendee_added."""
    _check_choice("role", role, ATTENDEE_ROLES)
    _check_choice("rsvp_status", rsvp_status, RSVP_STATUSES)
    event = _event_row(conn, org_id, event_id)
    if event["status"] == "cancelled":
        raise ActivityRejected(f"event {event_id} is cancelled; attendees cannot be added")
    kol = conn.execute("SELECT is_archived FROM kols WHERE id = ? AND org_id = ?", (kol_id, org_id)).fetchone()
    if kol is None:
        raise ActivityNotFound(f"No KOL with id {kol_id!r} in this organization")
    if kol["is_archived"]:
        raise ActivityRejected(f"KOL {kol_id} is archived and cannot be invited")
    if _attendee_row(conn, event_id, kol_id) is not None:
        raise ActivityRejected(f"KOL {kol_id} is already an attendee of event {event_id}")
    conn.execute(
        "INSERT INTO event_attendees (event_id, kol_id, org_id, role, rsvp_status, attended, updated_at) "
        "VALUES (?, ?, ?, ?, ?, 0, ?)",
        (event_id, kol_id, org_id, role, rsvp_status, now_iso()),
    )
    attendee = attendee_shape(_attendee_row(conn, event_id, kol_id))
    outbox.emit(conn, org_id, "event.attendee_added", {**attendee, "event": _event_ref(event)})
    return attendee


def update_rsvp(conn: sqlite3.Connection, org_id: str, event_id: str, kol_id: str,
                rsvp_status: str) -> dict[str, Any]:
    """Set an attendee's RSVP; emits event.rsvp_updated (with previous_rsvp_status) when it changes."""
    _check_choice("rsvp_status", rsvp_status, RSVP_STATUSES)
    event = _event_row(conn, org_id, event_id)
    row = _existing_attendee(conn, event_id, kol_id)
    previous = row["rsvp_status"]
    if previous == rsvp_status:
        return attendee_shape(row)
    conn.execute("UPDATE event_attendees SET rsvp_status = ?, updated_at = ? WHERE event_id = ? AND kol_id = ?",
                 (rsvp_status, now_iso(), event_id, kol_id))
    attendee = attendee_shape(_attendee_row(conn, event_id, kol_id))
    outbox.emit(conn, org_id, "event.rsvp_updated",
                {**attendee, "previous_rsvp_status": previous, "event": _event_ref(event)})
    return attendee


def record_attendance(conn: sqlite3.Connection, org_id: str, event_id: str, kol_id: str,
                      attended: bool = True) -> dict[str, Any]:
    """Mark whether an attendee attended; refreshes the KOL's derived fields. No event name exists."""
    event = _event_row(conn, org_id, event_id)
    if event["status"] == "cancelled":
        raise ActivityRejected(f"event {event_id} is cancelled; nobody attended it")
    row = _existing_attendee(conn, event_id, kol_id)
    if bool(row["attended"]) == attended:
        return attendee_shape(row)
    now = now_iso()
    conn.execute(
        "UPDATE event_attendees SET attended = ?, rsvp_status = CASE WHEN ? THEN 'accepted' ELSE rsvp_status END, "
        "updated_at = ? WHERE event_id = ? AND kol_id = ?",
        (int(attended), int(attended), now, event_id, kol_id),
    )
    metrics.refresh_kol_metrics(conn, [kol_id], now=now)
    return attendee_shape(_attendee_row(conn, event_id, kol_id))


def add_interaction(conn: sqlite3.Connection, org_id: str, kol_id: str, type: str, *,
                    summary: str | None = None, responded: bool = False,
                    occurred_at: str | None = None) -> dict[str, Any]:
    """Log a field interaction with a KOL; refreshes the KOL's derived fields."""
    _check_choice("type", type, INTERACTION_TYPES)
    _kol_exists(conn, org_id, kol_id)
    now = now_iso()
    interaction = {"id": new_id("int_"), "kol_id": kol_id, "type": type, "occurred_at": occurred_at or now,
                   "summary": summary, "responded": bool(responded)}
    conn.execute(
        "INSERT INTO interactions (id, org_id, kol_id, type, occurred_at, summary, responded) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (interaction["id"], org_id, kol_id, type, interaction["occurred_at"], summary, int(bool(responded))),
    )
    metrics.refresh_kol_metrics(conn, [kol_id], now=now)
    return interaction


def add_publication(conn: sqlite3.Connection, org_id: str, kol_id: str, title: str, *,
                    journal: str | None = None, year: int | None = None, citations: int = 0,
                    doi: str | None = None) -> dict[str, Any]:
    """Record a publication of a KOL; refreshes publications_count and h_index."""
    _kol_exists(conn, org_id, kol_id)
    publication = {"id": new_id("pub_"), "kol_id": kol_id, "title": title, "journal": journal, "year": year,
                   "citations": citations, "doi": doi}
    conn.execute(
        "INSERT INTO publications (id, org_id, kol_id, title, journal, year, citations, doi) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (publication["id"], org_id, kol_id, title, journal, year, citations, doi),
    )
    metrics.refresh_kol_metrics(conn, [kol_id])
    return publication


# ---- helpers --------------------------------------------------------------------------


def _event_row(conn: sqlite3.Connection, org_id: str, event_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM events WHERE id = ? AND org_id = ?", (event_id, org_id)).fetchone()
    if row is None:
        raise ActivityNotFound(f"No event with id {event_id!r} in this organization")
    return row


def _event_ref(row: sqlite3.Row) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "date": row["date"]}


def _attendee_row(conn: sqlite3.Connection, event_id: str, kol_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM event_attendees WHERE event_id = ? AND kol_id = ?",
                        (event_id, kol_id)).fetchone()


def _existing_attendee(conn: sqlite3.Connection, event_id: str, kol_id: str) -> sqlite3.Row:
    row = _attendee_row(conn, event_id, kol_id)
    if row is None:
        raise ActivityNotFound(f"KOL {kol_id!r} is not an attendee of event {event_id!r}")
    return row


def _attended_kol_ids(conn: sqlite3.Connection, event_id: str) -> list[str]:
    sql = "SELECT kol_id FROM event_attendees WHERE event_id = ? AND attended = 1"
    return [r[0] for r in conn.execute(sql, (event_id,))]


def _kol_exists(conn: sqlite3.Connection, org_id: str, kol_id: str) -> None:
    if conn.execute("SELECT 1 FROM kols WHERE id = ? AND org_id = ?", (kol_id, org_id)).fetchone() is None:
        raise ActivityNotFound(f"No KOL with id {kol_id!r} in this organization")


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_event_fields(fields: dict[str, Any], required: tuple[str, ...]) -> None:
    for name in required:
        if not fields.get(name):
            raise ValueError(f"event field {name!r} is required")
    if "type" in fields:
        _check_choice("type", fields["type"], EVENT_TYPES)
    if "status" in fields:
        _check_choice("status", fields["status"], EVENT_STATUSES)
    if "date" in fields:
        try:
            date.fromisoformat(fields["date"])
        except (TypeError, ValueError):
            raise ValueError(f"event date must be YYYY-MM-DD; got {fields['date']!r}") from None
