"""Event, attendee and interaction writes (service/store/activity.py): events, derived fields, rules."""

from __future__ import annotations

import json

import pytest

from service import admin
from service.store import activity, db, kols


@pytest.fixture
def store(tmp_path):
    """(conn, org_id, kol_id): an empty organization with one active KOL."""
    path = tmp_path / "service.db"
    org_id = admin.create_org(path, "Activity Medical", "enterprise")
    conn = db.connect(path)
    with db.transaction(conn):
        kol = kols.create_kol(conn, org_id, {"full_name": "Ingrid Berg", "specialties": ["electrophysiology"],
                                             "email": "ingrid.berg@ki.se"}, None)
    yield conn, org_id, kol["id"]
    conn.close()


def _events(conn, org_id) -> list[tuple[str, dict]]:
    rows = conn.execute("SELECT event, payload FROM webhook_events WHERE org_id = ? ORDER BY seq", (org_id,))
    return [(r[0], json.loads(r[1])["data"]) for r in rows]


def _kol(conn, kol_id):
    return conn.execute("SELECT * FROM kols WHERE id = ?", (kol_id,)).fetchone()


def test_event_lifecycle_emits_each_event_kind_with_its_data(store):
    conn, org_id, kol_id = store
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "EHRA Congress 2027", "type": "congress",
                                                     "date": "2027-03-28", "city": "Berlin", "country": "DE"})
    with db.transaction(conn):
        activity.add_attendee(conn, org_id, event["id"], kol_id, role="speaker")
    with db.transaction(conn):
        activity.update_rsvp(conn, org_id, event["id"], kol_id, "accepted")
    with db.transaction(conn):
        activity.update_event(conn, org_id, event["id"], {"date": "2027-03-29"})
    with db.transaction(conn):
        activity.cancel_event(conn, org_id, event["id"])
    emitted = [e for e in _events(conn, org_id) if e[0].startswith("event.")]
    assert [name for name, _ in emitted] == [
        "event.created", "event.attendee_added", "event.rsvp_updated", "event.updated", "event.cancelled"]
    created, added, rsvp, updated, cancelled = (data for _, data in emitted)
    assert created["id"].startswith("evt_") and created["status"] == "scheduled"
    assert created["location"] == {"city": "Berlin", "country": "DE"}
    assert added["kol_id"] == kol_id and added["role"] == "speaker" and added["rsvp_status"] == "invited"
    assert added["event"] == {"id": event["id"], "name": "EHRA Congress 2027", "date": "2027-03-28"}
    assert (rsvp["rsvp_status"], rsvp["previous_rsvp_status"]) == ("accepted", "invited")
    assert updated["changed"] == ["date"] and updated["date"] == "2027-03-29"
    assert cancelled["status"] == "cancelled"


def test_attendance_and_interactions_recompute_derived_kol_fields(store):
    conn, org_id, kol_id = store
    before = _kol(conn, kol_id)
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "Advisory Board: leadless pacing",
                                                     "type": "advisory_board", "date": "2026-06-10"})
        activity.add_attendee(conn, org_id, event["id"], kol_id, rsvp_status="accepted")
        activity.record_attendance(conn, org_id, event["id"], kol_id)
    for _ in range(3):
        with db.transaction(conn):
            activity.add_interaction(conn, org_id, kol_id, "call", responded=True,
                                     occurred_at="2026-07-01T10:00:00.000000Z")
    after = _kol(conn, kol_id)
    assert after["event_count"] == 1
    assert after["last_interaction"] == "2026-07-01T10:00:00.000000Z"
    assert after["engagement_level"] == "medium"  # 3 * 1 event + 2 * 3 interactions = 9
    assert after["response_rate"] == 1.0
    assert after["updated_at"] > before["updated_at"]


def test_cancelling_an_event_withdraws_its_attendance(store):
    conn, org_id, kol_id = store
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "Webinar: PFA", "type": "webinar",
                                                     "date": "2026-12-01"})
        activity.add_attendee(conn, org_id, event["id"], kol_id, rsvp_status="accepted")
        activity.record_attendance(conn, org_id, event["id"], kol_id)
    assert _kol(conn, kol_id)["event_count"] == 1
    with db.transaction(conn):
        activity.cancel_event(conn, org_id, event["id"])
    assert _kol(conn, kol_id)["event_count"] == 0


def test_publications_feed_h_index(store):
    conn, org_id, kol_id = store
    for citations in (10, 4, 3, 1):
        with db.transaction(conn):
            activity.add_publication(conn, org_id, kol_id, "PFA outcomes", journal="Heart Rhythm", year=2025,
                                     citations=citations)
    row = _kol(conn, kol_id)
    assert (row["publications_count"], row["h_index"]) == (4, 3)


def test_changes_the_state_does_not_allow_are_refused(store):
    conn, org_id, kol_id = store
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "Workshop", "type": "workshop", "date": "2027-01-05"})
        activity.add_attendee(conn, org_id, event["id"], kol_id)
    with pytest.raises(activity.ActivityRejected, match="already an attendee"), db.transaction(conn):
        activity.add_attendee(conn, org_id, event["id"], kol_id)
    with pytest.raises(ValueError, match="rsvp_status must be one of"), db.transaction(conn):
        activity.update_rsvp(conn, org_id, event["id"], kol_id, "maybe")
    with db.transaction(conn):
        activity.cancel_event(conn, org_id, event["id"])
    with pytest.raises(activity.ActivityRejected, match="cancelled"), db.transaction(conn):
        activity.update_event(conn, org_id, event["id"], {"name": "Renamed"})
    with db.transaction(conn):
        done = activity.create_event(conn, org_id, {"name": "Past", "type": "dinner_meeting", "date": "2026-01-05",
                                                    "status": "completed"})
    with pytest.raises(activity.ActivityRejected, match="completed"), db.transaction(conn):
        activity.cancel_event(conn, org_id, done["id"])
    with db.transaction(conn):
        kols.archive_kol(conn, org_id, kol_id)
    with pytest.raises(activity.ActivityRejected, match="archived"), db.transaction(conn):
        activity.add_attendee(conn, org_id, done["id"], kol_id)
    with pytest.raises(ValueError, match="YYYY-MM-DD"), db.transaction(conn):
        activity.create_event(conn, org_id, {"name": "Bad", "type": "congress", "date": "next week"})


def test_an_unchanged_rsvp_emits_nothing(store):
    conn, org_id, kol_id = store
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "Dinner", "type": "dinner_meeting", "date": "2027-02-01"})
        activity.add_attendee(conn, org_id, event["id"], kol_id, rsvp_status="tentative")
    count = len(_events(conn, org_id))
    with db.transaction(conn):
        activity.update_rsvp(conn, org_id, event["id"], kol_id, "tentative")
    assert len(_events(conn, org_id)) == count


def test_another_organizations_event_is_not_found(store, tmp_path):
    conn, org_id, kol_id = store
    other = admin.create_org(tmp_path / "service.db", "Other Medical", "starter")
    with db.transaction(conn):
        event = activity.create_event(conn, org_id, {"name": "Private", "type": "webinar", "date": "2027-02-01"})
    with pytest.raises(activity.ActivityNotFound), db.transaction(conn):
        activity.cancel_event(conn, other, event["id"])
    with pytest.raises(activity.ActivityNotFound), db.transaction(conn):
        activity.add_interaction(conn, other, kol_id, "email")
