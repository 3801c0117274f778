"""How each event of a batch ends: applied, failed alone (stays pending, tried again after a wait), or
quarantined by this run (it can never be applied, or this failure is its COMMOPS_EVENTS_MAX_ATTEMPTS-th);
and the `webhook_events` rows that say so."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from webhooks.refetch import Fetched
from webhooks.reshape import event_row
from webhooks.routing import Parsed, Plan
from resources.inbox.envelope import Envelope, InvalidEnvelope
from resources.inbox import InboxEvent


@dataclass
class Settled:
    applied: list[Parsed] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # failed alone: stays pending, attempts + 1
    quarantined: dict[str, str] = field(default_factory=dict)  # set aside by this run (failed included)

    @property
    def waiting(self) -> list[str]:
        """Failed alone and still pending: tried again after their wait."""
        return [event_id for event_id in self.failed if event_id not in self.quarantined]


def settle(plan: Plan, fetched: Fetched, max_attempts: int) -> Settled:
    settled = Settled(quarantined=dict(plan.never_applicable))
    for parsed in plan.parsed:
        failures = [(kol_id, fetched.kol_failures[kol_id]) for kol_id in parsed.kol_ids if kol_id in fetched.kol_failures]
        if not failures:
            settled.applied.append(parsed)
            continue
        kol_id, error = failures[0]
        settled.failed[parsed.event.id] = f"refetching KOL {kol_id}: {error}"
        if parsed.event.attempts + 1 >= max_attempts:
            settled.quarantined[parsed.event.id] = settled.failed[parsed.event.id]
    return settled


def event_rows(events: list[InboxEvent], plan: Plan, settled: Settled, run_id: str) -> list[dict]:
    """The `webhook_events` rows of the batch: applied now, or quarantined by this run with its error."""
    applied_at = datetime.now(UTC)
    rows = [event_row(p.event, p.envelope, run_id, applied_at=applied_at) for p in settled.applied]
    envelopes = {p.event.id: p.envelope for p in plan.parsed}
    rows += [
        event_row(event, envelopes.get(event.id), run_id, error=settled.quarantined[event.id], attempts=event.attempts + 1)
        for event in events
        if event.id in settled.quarantined
    ]
    return rows


def set_aside_rows(events: list[InboxEvent], run_id: str) -> list[dict]:
    """Rows for events quarantined outside the apply step (by the job's failure hook or the run failure
    sensor), written by the next run so that every quarantined event has its row."""
    return [event_row(event, _envelope_or_none(event), run_id, error=event.last_error or "quarantined") for event in events]


def _envelope_or_none(event: InboxEvent) -> Envelope | None:
    try:
        return event.envelope()
    except InvalidEnvelope:
        return None
