"""Which organization an inbox event belongs to: its envelope's `organization_id`, matched against the
registry (`commops orgs add ... --organization-id org_...`; COMMOPS_ORGANIZATION_ID for `default`).

With a single organization that has no organization id (the single-organization setup), every event
is its own. Otherwise an event whose organization matches none is never applied to another: it is
quarantined, naming the organization id and how to register it.
"""

from __future__ import annotations

from collections import defaultdict

from resources.orgs import Org
from resources.inbox import InboxEvent


def route_events(events: list[InboxEvent], orgs: list[Org]) -> tuple[dict[str, list[InboxEvent]], list[InboxEvent]]:
    """({organization name: its events, in order}, events of no known organization)."""
    by_id = {org.organization_id: org.name for org in orgs if org.organization_id}
    sole = orgs[0].name if len(orgs) == 1 and not orgs[0].organization_id else None
    routed: dict[str, list[InboxEvent]] = defaultdict(list)
    unknown: list[InboxEvent] = []
    for event in events:
        name = by_id.get(event.organization_id or "") or sole
        if name is None:
            unknown.append(event)
        else:
            routed[name].append(event)
    return dict(routed), unknown


def unknown_organization(event: InboxEvent) -> str:
    """Why an event of no known organization is set aside (its quarantine error)."""
    if not event.organization_id:
        return ("the event names no organization_id and several organizations are registered: "
                "it cannot be told whose it is")
    return (f"organization {event.organization_id} is not registered: commops orgs add NAME --base-url ... "
            f"--api-key-env ... --organization-id {event.organization_id}, then commops events retry {event.id}")
