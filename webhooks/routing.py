"""What a batch of events asks for: each inbox event parsed once, its `data` read once, and routed to
what must be refetched.

An event that can never be applied is set aside here with its reason: a payload that is not an
envelope (stored by an older receiver), a kol.* event that names no KOL, or an event naming a KOL by
something that is not a KOL id of the spec (`kol_` and the opaque part): such an id is never fetched. A value inside `data`
that cannot be read (an open's `occurred_at`, a signal's `published_at`) never sets an event aside:
it is left out (NULL), counted, and kept as sent in `webhook_events.data`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from commops_spec.constants import ID_PREFIXES, is_spec_id
from commops_spec.timestamps import UnreadableTimestamp, read_timestamp
from resources.inbox.envelope import Envelope, InvalidEnvelope
from resources.inbox import InboxEvent

BATCH_LIMIT = 500  # events a run applies at most

KOL_EVENTS = frozenset({"kol.created", "kol.updated", "kol.tier_changed", "kol.archived"})
ENGAGEMENT_EVENTS = frozenset({"campaign.email_opened", "campaign.link_clicked"})
# Events naming a KOL whose derived fields (opens, attendance, engagement level) the service moved
# without emitting kol.updated: the KOL is refetched too.
KOL_NAMING_EVENTS = ENGAGEMENT_EVENTS | {"event.attendee_added", "event.rsvp_updated"}
SIGNAL_EVENTS = frozenset({"signal.new", "signal.high_impact"})


@dataclass(frozen=True)
class Parsed:
    """An inbox event that can be applied, with its envelope and the KOLs it names."""

    event: InboxEvent
    envelope: Envelope
    kol_ids: tuple[str, ...] = ()
    engagement: dict[str, Any] | None = None  # its campaign_engagement row (opens and clicks)


@dataclass
class Plan:
    parsed: list[Parsed] = field(default_factory=list)
    never_applicable: dict[str, str] = field(default_factory=dict)  # event id -> why (names the field)
    kol_ids: dict[str, bool] = field(default_factory=dict)  # id -> archived by an event of the batch
    campaigns: bool = False
    signals: bool = False
    signal_published: list[datetime] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    unreadable: int = 0  # values present in data that could not be read

    def read_text(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        self.unreadable += 1
        return None

    def read_time(self, value: Any) -> datetime | None:
        try:
            return read_timestamp(value)
        except UnreadableTimestamp:
            self.unreadable += 1
            return None


def plan_batch(events: list[InboxEvent]) -> Plan:
    plan = Plan()
    for event in events:
        plan.kinds[event.event] += 1
        try:
            envelope = event.envelope()
        except InvalidEnvelope as error:
            plan.never_applicable[event.id] = str(error)
            continue
        name, data = envelope.event, envelope.data
        named: list[str] = []
        if name in KOL_EVENTS:
            if not isinstance(data.get("id"), str) or not data["id"]:
                plan.never_applicable[event.id] = f"data.id must name the KOL (a string) in a {name} event"
                continue
            named.append(data["id"])
        if name in KOL_NAMING_EVENTS and (kol_id := plan.read_text(data.get("kol_id"))):
            named.append(kol_id)
        if named and not is_spec_id(named[0], "kol"):
            field = "data.id" if name in KOL_EVENTS else "data.kol_id"
            plan.never_applicable[event.id] = (f"{field} {named[0][:80]!r} is not a KOL id ({ID_PREFIXES['kol']} followed "
                                               "by letters, digits, _ or -): it is never fetched")
            continue
        for kol_id in named:
            plan.kol_ids[kol_id] = plan.kol_ids.get(kol_id, False) or name == "kol.archived"
        if name.startswith("campaign."):
            plan.campaigns = True
        if name in SIGNAL_EVENTS:
            plan.signals = True
            if (published := plan.read_time(data.get("published_at"))) is not None:
                plan.signal_published.append(published)
        engagement = _engagement_row(plan, event, envelope) if name in ENGAGEMENT_EVENTS else None
        plan.parsed.append(Parsed(event, envelope, tuple(named), engagement))
    return plan


def _engagement_row(plan: Plan, event: InboxEvent, envelope: Envelope) -> dict[str, Any]:
    data = envelope.data
    return {
        "event_id": envelope.id,
        "event": envelope.event,
        "campaign_id": plan.read_text(data.get("campaign_id")),
        "kol_id": data.get("kol_id") if isinstance(data.get("kol_id"), str) else None,  # counted above
        "email": plan.read_text(data.get("email")),
        "occurred_at": plan.read_time(data.get("occurred_at")),
        "received_at": read_timestamp(event.received_at),
    }
