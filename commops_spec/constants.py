"""Values the specification names (parts 2, 3, 5, 6 and 8)."""

import re

ID_PREFIXES = {
    "kol": "kol_",
    "campaign": "cmp_",
    "product": "prod_",
    "product_line": "pl_",
    "signal": "sig_",
    "webhook": "wh_",
    "webhook_event": "wh_evt_",
    "organization": "org_",
}

# The opaque part after an id's prefix, as far as this code accepts one: letters, digits, `_` and `-`,
# at most 128. The spec calls it opaque; every id a spec-following service issues fits, and no path
# syntax (`/`, `.`, `%`, `?`, `#`) or whitespace does. One pattern for the service, the pipeline and
# the warehouse check (DuckDB's regexp_full_match reads the same syntax).
ID_OPAQUE_PART = r"[A-Za-z0-9_-]{1,128}"


def id_pattern(prefix: str) -> str:
    """The regular expression (to be matched whole) of the ids that start with `prefix`."""
    return re.escape(prefix) + ID_OPAQUE_PART


_ID_PATTERNS = {kind: re.compile(id_pattern(prefix)) for kind, prefix in ID_PREFIXES.items()}


def is_spec_id(value: object, kind: str | None = None) -> bool:
    """True when `value` is a string that is wholly an id of `kind` (a key of ID_PREFIXES; None: any
    kind): its prefix, then the opaque part. Anything else is never put in a request path."""
    if not isinstance(value, str):
        return False
    patterns = _ID_PATTERNS.values() if kind is None else (_ID_PATTERNS[kind],)
    return any(pattern.fullmatch(value) for pattern in patterns)


KOL_TIERS = ("tier_1", "tier_2", "tier_3")
ENGAGEMENT_LEVELS = ("high", "medium", "low")

CAMPAIGN_TYPES = ("product_update", "event_invitation", "new_product_launch", "newsletter", "custom")
CAMPAIGN_STATUSES = ("draft", "active", "paused", "completed")
SCHEDULE_TYPES = ("immediate", "scheduled", "recurring")
PERSONALIZATION_VARIABLES = ("full_name", "first_name", "title", "institution", "specialty")

PRODUCT_STATUSES = ("active", "in_development", "discontinued")
MARKETS = ("US", "EU", "CN", "JP", "IN")

SIGNAL_SOURCES = ("fda", "ema", "nmpa", "pmda", "tga", "health_canada", "mhra", "industry")
IMPACT_LEVELS = ("critical", "high", "medium", "low")
SENTIMENTS = ("positive", "neutral", "negative")

SORT_ORDERS = ("asc", "desc")
DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 100

SCOPES = (
    "kols:read",
    "kols:write",
    "events:read",
    "events:write",
    "campaigns:read",
    "campaigns:write",
    "signals:read",
    "products:read",
    "products:write",
)

# Requests per minute and per day; None means unlimited.
PLANS = {
    "starter": {"per_minute": 60, "per_day": 10_000},
    "professional": {"per_minute": 300, "per_day": 100_000},
    "enterprise": {"per_minute": 1_000, "per_day": None},
}

EVENTS = (
    "kol.created",
    "kol.updated",
    "kol.archived",
    "kol.tier_changed",
    "event.created",
    "event.updated",
    "event.cancelled",
    "event.attendee_added",
    "event.rsvp_updated",
    "campaign.created",
    "campaign.sent",
    "campaign.email_opened",
    "campaign.link_clicked",
    "signal.new",
    "signal.high_impact",
)

WEBHOOK_SIGNATURE_HEADER = "x-service-signature"
WEBHOOK_RETRY_DELAYS_SECONDS = (60, 300, 1800, 7200, 86400)
