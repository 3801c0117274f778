"""The event envelope of part 6: {id, event, created_at, data, organization_id}."""

from __future__ import annotations

import json
from typing import Any

MAX_FIELD_LENGTH = 255  # id, event, created_at, organization_id: short strings in every real event


class InvalidEnvelope(ValueError):
    """The body is not JSON, or not an object with id, event, created_at (strings) and data (object)."""


def parse_envelope(body: bytes) -> dict[str, Any]:
    """The envelope of a (verified) body; raises InvalidEnvelope with a message for the 400."""
    try:
        envelope = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidEnvelope("the body is not UTF-8") from None
    except ValueError:
        raise InvalidEnvelope("the body is not valid JSON") from None
    if not isinstance(envelope, dict):
        raise InvalidEnvelope("the body must be a JSON object")
    missing = [name for name in ("id", "event", "created_at", "data") if name not in envelope]
    if missing:
        raise InvalidEnvelope(f"the envelope lacks {', '.join(missing)}")
    for name in ("id", "event", "created_at"):
        value = envelope[name]
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_FIELD_LENGTH:
            raise InvalidEnvelope(f"{name} must be a non-empty string of at most {MAX_FIELD_LENGTH} characters")
    if not isinstance(envelope["data"], dict):
        raise InvalidEnvelope("data must be a JSON object")
    org = envelope.get("organization_id")
    if org is not None and (not isinstance(org, str) or len(org) > MAX_FIELD_LENGTH):
        raise InvalidEnvelope("organization_id must be a string")
    return envelope
