"""The event envelope of part 6: {id, event, created_at, data, organization_id}, read one way by the
receiver (a 400 naming the field) and by the incremental job (quarantine naming the field).

What is checked is what every event has, whatever its kind: `data` beyond being an object is
event-specific and mostly not shown by the spec, so its content is the job's business
(docs/spec-decisions.md#receiver).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from commops_spec.timestamps import UnreadableTimestamp, parse_timestamp

MAX_FIELD_LENGTH = 255  # id, event, created_at, organization_id: short strings in every real event
_REQUIRED = ("id", "event", "created_at", "data")


class InvalidEnvelope(ValueError):
    """The body can never be an event: not UTF-8 JSON, not an object, or a field of the envelope is
    missing or unreadable. `field` names it (None when the body as a whole is the problem)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Envelope:
    id: str  # wh_evt_..., the same on every redelivery
    event: str  # the event name (possibly one the spec does not list)
    created_at: datetime  # aware, UTC (a timestamp without zone designator is UTC)
    data: dict[str, Any]
    organization_id: str | None
    as_sent: dict[str, Any]  # the whole JSON object, created_at as written

    @property
    def created_at_text(self) -> str:
        return self.as_sent["created_at"]


def parse_envelope(body: bytes) -> Envelope:
    """The envelope of a (verified) body; InvalidEnvelope, with a message naming the field, when it is not one."""
    try:
        fields = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidEnvelope("the body is not UTF-8") from None
    except ValueError:
        raise InvalidEnvelope("the body is not valid JSON") from None
    except RecursionError:  # arrays or objects nested deeper than the parser's stack allows
        raise InvalidEnvelope("the body nests arrays or objects too deeply to be read") from None
    if not isinstance(fields, dict):
        raise InvalidEnvelope("the body must be a JSON object")
    missing = [name for name in _REQUIRED if name not in fields]
    if missing:
        raise InvalidEnvelope(f"the envelope lacks {', '.join(missing)}", missing[0])
    for name in ("id", "event", "created_at"):
        value = fields[name]
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_FIELD_LENGTH:
            raise InvalidEnvelope(f"{name} must be a non-empty string of at most {MAX_FIELD_LENGTH} characters", name)
    if not isinstance(fields["data"], dict):
        raise InvalidEnvelope("data must be a JSON object", "data")
    org = fields.get("organization_id")
    if org is not None and (not isinstance(org, str) or len(org) > MAX_FIELD_LENGTH):
        raise InvalidEnvelope("organization_id must be a string", "organization_id")
    try:
        created_at = parse_timestamp(fields["created_at"])
    except UnreadableTimestamp:
        raise InvalidEnvelope(
            f"created_at is not an ISO 8601 timestamp: {fields['created_at']!r:.60}", "created_at"
        ) from None
    return Envelope(fields["id"], fields["event"], created_at, fields["data"], org, fields)
