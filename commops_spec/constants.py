"""Values the specification names (parts 2, 3, 5, 6 and 8)."""

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
