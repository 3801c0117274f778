"""Realistic sample payloads for POST /v1/webhooks/{id}/test, one per event kind.

`data` has the shape the real event carries; ids are recognisably fake (…_sample…) so a
receiver can tell a test from a real change.
"""

from __future__ import annotations

from typing import Any

from commops_spec.constants import ID_PREFIXES
from service.store.db import new_id, now_iso
from service.store.outbox import event_body

_KOL = {
    "id": "kol_sample0000000001",
    "full_name": "Dr. Elena Marquez",
    "title": "Director of Interventional Cardiology",
    "institution": "Mayo Clinic",
    "department": "Cardiovascular Medicine",
    "specialties": ["interventional_cardiology", "structural_heart"],
    "expertise_areas": ["TAVR", "complex PCI"],
    "tags": ["advisory_board", "speaker"],
    "tier": "tier_1",
    "engagement_level": "high",
    "email": "elena.marquez@example.org",
    "phone": "+1-507-555-0142",
    "location": {"city": "Rochester", "state": "MN", "country": "US"},
    "event_count": 7,
    "last_interaction": "2026-11-18T15:30:00.000000Z",
    "is_archived": False,
    "created_at": "2024-03-02T09:12:44.000000Z",
    "updated_at": "2026-11-20T10:05:13.000000Z",
}

_CAMPAIGN = {
    "id": "cmp_sample0000000001",
    "name": "Q4 drug-eluting stent update",
    "description": "Clinical data update for interventional cardiologists",
    "type": "product_update",
    "status": "active",
    "audience_count": 182,
    "email": {"subject": "New 3-year outcomes for {{institution}}", "from_name": "Medical Affairs"},
    "schedule": {"type": "immediate", "send_at": None},
    "products": ["prod_sample0000000001"],
    "metrics": {"sent": 182, "delivered": 179, "opened": 96, "clicked": 31, "open_rate": 0.5363, "click_rate": 0.1732},
    "created_at": "2026-11-10T08:00:00.000000Z",
    "updated_at": "2026-11-20T16:42:09.000000Z",
    "sent_at": "2026-11-12T14:00:00.000000Z",
}

_SIGNAL = {
    "id": "sig_sample0000000001",
    "title": "FDA grants 510(k) clearance for next-generation coronary stent system",
    "url": "https://www.fda.gov/medical-devices/510k-clearances",
    "source": {"name": "FDA", "country": "US", "region": "North America"},
    "content": "The U.S. Food and Drug Administration cleared a next-generation drug-eluting coronary stent...",
    "ai_summary": "A competitor's coronary stent received 510(k) clearance; expect pricing pressure in US accounts.",
    "impact": {"level": "high", "score": 82, "categories": ["competitive", "regulatory"]},
    "sentiment": "negative",
    "product_relevance": [
        {
            "product_id": "prod_sample0000000001",
            "product_name": "Coronary DES platform",
            "relevance_type": "competitor",
            "relevance_score": 0.91,
        }
    ],
    "is_read": False,
    "is_bookmarked": False,
    "published_at": "2026-11-21T13:00:00.000000Z",
    "fetched_at": "2026-11-21T13:05:12.000000Z",
    "updated_at": "2026-11-21T13:05:12.000000Z",
}

_EVENT = {
    "id": "evt_sample0000000001",
    "name": "TCT 2026 Advisory Board Dinner",
    "type": "advisory_board",
    "date": "2026-12-04",
    "location": {"city": "Washington", "country": "US"},
    "status": "scheduled",
    "created_at": "2026-11-01T09:00:00.000000Z",
    "updated_at": "2026-11-20T09:00:00.000000Z",
}

_ATTENDEE = {
    "event_id": _EVENT["id"],
    "kol_id": _KOL["id"],
    "role": "speaker",
    "rsvp_status": "accepted",
    "attended": False,
    "updated_at": "2026-11-20T09:30:00.000000Z",
}


def _sample_data(event: str) -> dict[str, Any]:
    """The data of each kind, shaped as service/store emits it."""
    if event == "kol.tier_changed":
        return {**_KOL, "previous_tier": "tier_2"}
    if event == "kol.archived":
        return {**_KOL, "is_archived": True}
    if event.startswith("kol."):
        return dict(_KOL)
    if event == "campaign.created":
        return {**_CAMPAIGN, "status": "draft", "sent_at": None, "metrics": dict.fromkeys(_CAMPAIGN["metrics"], 0)}
    if event in ("campaign.email_opened", "campaign.link_clicked"):
        return {
            "campaign_id": _CAMPAIGN["id"],
            "email": _KOL["email"],
            "kol_id": _KOL["id"],
            "occurred_at": "2026-11-20T16:42:09.000000Z",
        }
    if event.startswith("campaign."):
        return dict(_CAMPAIGN)
    if event.startswith("signal."):
        return dict(_SIGNAL)
    if event == "event.updated":
        return {**_EVENT, "changed": ["date"]}
    if event == "event.cancelled":
        return {**_EVENT, "status": "cancelled"}
    event_ref = {"id": _EVENT["id"], "name": _EVENT["name"], "date": _EVENT["date"]}
    if event == "event.attendee_added":
        return {**_ATTENDEE, "rsvp_status": "invited", "event": event_ref}
    if event == "event.rsvp_updated":
        return {**_ATTENDEE, "previous_rsvp_status": "invited", "event": event_ref}
    return dict(_EVENT)


def sample_payload(org_id: str, event: str) -> tuple[str, bytes]:
    """(event id, exact body bytes) of a test event, in the part 6 payload shape."""
    event_id = new_id(ID_PREFIXES["webhook_event"], 20)
    return event_id, event_body(event_id, event, now_iso(), _sample_data(event), org_id)
