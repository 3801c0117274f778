"""The incremental job's assets: webhook events from the inbox applied to the warehouse.

| module | holds |
|---|---|
| `routing` | each event parsed once and routed: what it names, what must be refetched, what can never be applied |
| `refetch` | the current state of what the events name, through the API |
| `reshape` | rows in the warehouse's shapes (a KOL detail as a `kols` row, a `webhook_events` row) |
| `settle` | how each event ends (applied, failed alone, quarantined) and its `webhook_events` row |
| `write` | the batch merged in one writer session |
| `apply` | the `warehouse/webhook_events` asset: read, route, refetch, settle, write, then update the inbox |
| `mark` | the `webhooks/applied` asset: mark in the inbox what was published |

What each event asks for (never trusting the payload's order or content):

| event | what is refetched and merged |
|---|---|
| kol.created, kol.updated, kol.tier_changed, kol.archived | `GET /v1/kols/{id}` → `kols` (list shape) and `kol_details` |
| campaign.* | one complete walk of `/v1/campaigns` → `campaigns` |
| campaign.email_opened, campaign.link_clicked | + one `campaign_engagement` row; + the KOL named (`kol_id`) |
| event.attendee_added, event.rsvp_updated | the KOL named (`kol_id`): its event count and engagement move |
| signal.new, signal.high_impact | `/v1/signals?published_after=<watermark>` → `signals` |
| event.* (others), unknown names | recorded only |
"""

from assets.webhooks.apply import (
    APPLY_STEP, WEBHOOK_EVENTS_KEY, ApplyResult, event_ids_of, run_config, webhook_events,
)
from assets.webhooks.mark import APPLIED_KEY, applied

WEBHOOK_ASSETS = [webhook_events, applied]

__all__ = [
    "APPLIED_KEY",
    "APPLY_STEP",
    "WEBHOOK_ASSETS",
    "WEBHOOK_EVENTS_KEY",
    "ApplyResult",
    "event_ids_of",
    "run_config",
    "webhook_events",
]
