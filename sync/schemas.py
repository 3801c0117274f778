"""Explicit Arrow schemas of the four list resources, of the KOL detail and of the webhook tables.

Timestamps are UTC timestamps, nested objects structs, arrays lists. Every field carries
its description (field metadata "description"), which becomes the warehouse column comment.
Fields the API sends but these schemas do not name are kept in the JSON column `_extra`.
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
STRINGS = pa.list_(pa.string())


def field(name: str, type_: pa.DataType, description: str) -> pa.Field:
    return pa.field(name, type_, nullable=True, metadata={"description": description})


def long_text(name: str, description: str) -> pa.Field:
    """A free-text field of paragraphs: stored zstd-compressed in the warehouse (docs/pipeline.md#long-text-zstd)."""
    return pa.field(name, pa.string(), nullable=True, metadata={"description": description, "compression": "zstd"})


EXTRA_COLUMN = "_extra"
EXTRA = pa.field(
    EXTRA_COLUMN,
    pa.string(),
    nullable=True,
    metadata={
        "description": "JSON object of fields the API returned that this schema does not know (top-level and "
        "nested); NULL when none",
        "json": "true",  # a JSON column in the warehouse
    },
)

FETCHED_AT = "_fetched_at"
FETCHED = field(
    FETCHED_AT,
    TIMESTAMP,
    "Time the sync received this version of the row from the API (UTC, the sync's clock): of two versions "
    "of a row the later-received one is newer (the version of resources without updated_at)",
)

KOLS = pa.schema(
    [
        field("id", pa.string(), "KOL identifier (kol_...)"),
        field("full_name", pa.string(), "Full name"),
        field("title", pa.string(), "Professional title"),
        field("institution", pa.string(), "Primary institution or hospital"),
        field("department", pa.string(), "Department"),
        field("specialties", STRINGS, "Medical specialties (snake_case tokens)"),
        field("expertise_areas", STRINGS, "Areas of expertise"),
        field("research_interests", STRINGS, "Not in the spec's list shape: NULL unless the server's list items carry it; "
              "the detail's value is kol_details.research_interests"),
        field("tags", STRINGS, "Custom tags"),
        field("tier", pa.string(), "tier_1, tier_2 or tier_3"),
        field("engagement_level", pa.string(), "high, medium or low; computed by the service"),
        field("email", pa.string(), "Primary email address"),
        field("phone", pa.string(), "Phone number"),
        field(
            "location",
            pa.struct([("city", pa.string()), ("state", pa.string()), ("country", pa.string())]),
            "Location: city, state or province, country (ISO 3166-1 alpha-2)",
        ),
        field("bio", pa.string(), "Not in the spec's list shape: NULL unless the server's list items carry it; "
              "the detail's value is kol_details.bio"),
        field("notes", pa.string(), "Not in the spec's list shape: NULL unless the server's list items carry it; "
              "the detail's value is kol_details.notes"),
        field(
            "social",
            pa.struct([("linkedin", pa.string()), ("twitter", pa.string())]),
            "Not in the spec's list shape: NULL unless the server's list items carry it; the detail's value is kol_details.social",
        ),
        field("event_count", pa.int64(), "Number of events attended"),
        field("last_interaction", TIMESTAMP, "Time of the latest interaction (UTC)"),
        field("is_archived", pa.bool_(), "True when the KOL is archived (listed with is_archived=true)"),
        field("created_at", TIMESTAMP, "Creation time (UTC)"),
        field("updated_at", TIMESTAMP, "Last change in the service (UTC); merges keep the newer row"),
        FETCHED,
        EXTRA,
    ]
)

CAMPAIGNS = pa.schema(
    [
        field("id", pa.string(), "Campaign identifier (cmp_...)"),
        field("name", pa.string(), "Campaign name"),
        field("description", pa.string(), "Description"),
        field("type", pa.string(), "product_update, event_invitation, new_product_launch, newsletter or custom"),
        field("status", pa.string(), "draft, active, paused or completed"),
        field("audience_count", pa.int64(), "Number of recipients resolved for the audience"),
        field("email", pa.struct([("subject", pa.string()), ("from_name", pa.string())]), "Email subject and sender name"),
        field(
            "schedule",
            pa.struct([("type", pa.string()), ("send_at", TIMESTAMP), ("frequency", pa.string())]),
            "Schedule: type (immediate, scheduled, recurring), send_at (UTC), frequency (recurring schedules)",
        ),
        field(
            "metrics",
            pa.struct(
                [
                    ("sent", pa.int64()),
                    ("delivered", pa.int64()),
                    ("opened", pa.int64()),
                    ("clicked", pa.int64()),
                    ("open_rate", pa.float64()),
                    ("click_rate", pa.float64()),
                ]
            ),
            "Engagement: sent, delivered, opened, clicked counts; open_rate and click_rate (0-1)",
        ),
        field("products", STRINGS, "Ids of the products linked to the campaign (prod_...)"),
        field("created_at", TIMESTAMP, "Creation time (UTC)"),
        field("updated_at", TIMESTAMP, "Last change in the service (UTC), where the server sends it (the spec does not; not used for merging)"),
        field("sent_at", TIMESTAMP, "Time the campaign was sent (UTC)"),
        FETCHED,
        EXTRA,
    ]
)

MARKET_STATUS = pa.struct([("status", pa.string()), ("clearance_number", pa.string()), ("ce_mark", pa.bool_())])

PRODUCTS = pa.schema(
    [
        field("id", pa.string(), "Product identifier (prod_...)"),
        field("name", pa.string(), "Product name"),
        field("description", pa.string(), "Description"),
        field("product_line", pa.struct([("id", pa.string()), ("name", pa.string())]), "Product line: id (pl_...) and name"),
        field("status", pa.string(), "active, in_development or discontinued"),
        field("regulatory_status", pa.string(), "Primary regulatory status (free text)"),
        field("target_markets", STRINGS, "Market codes (US, EU, CN, JP, IN)"),
        field("key_features", STRINGS, "Key features"),
        field(
            "specifications",
            pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())])),
            "Specifications: list of name/value pairs",
        ),
        field(
            "market_status",
            pa.map_(pa.string(), MARKET_STATUS),
            "Regulatory status per market code: status, clearance_number or ce_mark (also flattened in product_market_status)",
        ),
        field("created_at", TIMESTAMP, "Creation time (UTC)"),
        field("updated_at", TIMESTAMP, "Last change in the service (UTC), where the server sends it (the spec does not; not used for merging)"),
        FETCHED,
        EXTRA,
    ]
)

SIGNALS = pa.schema(
    [
        field("id", pa.string(), "Signal identifier (sig_...)"),
        field("title", pa.string(), "Title"),
        field("url", pa.string(), "Link to the original publication"),
        field(
            "source",
            pa.struct([("name", pa.string()), ("country", pa.string()), ("region", pa.string())]),
            "Source: name, country, region",
        ),
        long_text("content", "Full content text"),
        long_text("ai_summary", "AI-generated summary"),
        field(
            "impact",
            pa.struct([("level", pa.string()), ("score", pa.float64()), ("categories", STRINGS)]),
            "Impact: level (critical, high, medium, low), score (0-100), categories",
        ),
        field("sentiment", pa.string(), "positive, neutral or negative"),
        field(
            "product_relevance",
            pa.list_(
                pa.struct(
                    [
                        ("product_id", pa.string()),
                        ("product_name", pa.string()),
                        ("relevance_type", pa.string()),
                        ("relevance_score", pa.float64()),
                    ]
                )
            ),
            "Relevant products (also flattened in signal_product_relevance)",
        ),
        field("is_read", pa.bool_(), "Read flag"),
        field("is_bookmarked", pa.bool_(), "Bookmark flag"),
        field("published_at", TIMESTAMP, "Publication time (UTC)"),
        field("fetched_at", TIMESTAMP, "Time the service fetched the signal (UTC)"),
        field("updated_at", TIMESTAMP, "Last change in the service (UTC), where the server sends it (the spec does not; not used for merging)"),
        FETCHED,
        EXTRA,
    ]
)

# GET /v1/kols/{id}: the fields the list shape lacks, keyed by the KOL id.
KOL_DETAILS = pa.schema(
    [
        field("id", pa.string(), "KOL identifier (kol_...), same as kols.id"),
        field("bio", pa.string(), "Professional biography"),
        field("notes", pa.string(), "Internal notes, not visible to the KOL"),
        field("research_interests", STRINGS, "Research interests"),
        field("social", pa.struct([("linkedin", pa.string()), ("twitter", pa.string())]), "Social profiles: linkedin URL, twitter handle"),
        field(
            "contact",
            pa.struct(
                [
                    ("email", pa.string()),
                    ("phone", pa.string()),
                    (
                        "address",
                        pa.struct(
                            [
                                ("street", pa.string()),
                                ("city", pa.string()),
                                ("state", pa.string()),
                                ("postal_code", pa.string()),
                                ("country", pa.string()),
                            ]
                        ),
                    ),
                ]
            ),
            "Contact: email, phone and postal address",
        ),
        field(
            "metrics",
            pa.struct(
                [
                    ("total_events", pa.int64()),
                    ("total_campaigns", pa.int64()),
                    ("email_open_rate", pa.float64()),
                    ("response_rate", pa.float64()),
                    ("h_index", pa.int64()),
                    ("publications_count", pa.int64()),
                ]
            ),
            "Metrics: total_events, total_campaigns, email_open_rate (0-1), response_rate (0-1), h_index, publications_count",
        ),
        field("updated_at", TIMESTAMP, "updated_at of the KOL when this detail was fetched (UTC)"),
        field("enriched_at", TIMESTAMP, "Time the detail was fetched by the sync (UTC)"),
        FETCHED,
        EXTRA,
    ]
)

# Webhook-driven tables (assets/webhooks/). Built by the pipeline from inbox events, not
# read from a list endpoint, so they have no _fetched_at or _extra.

# One row per campaign.email_opened / campaign.link_clicked event.
CAMPAIGN_ENGAGEMENT = pa.schema(
    [
        field("event_id", pa.string(), "Webhook event identifier (wh_evt_...), webhook_events.id"),
        field("event", pa.string(), "campaign.email_opened or campaign.link_clicked"),
        field("campaign_id", pa.string(), "Campaign identifier (campaigns.id)"),
        field("kol_id", pa.string(), "KOL identifier (kols.id) of the recipient; NULL for a recipient who is not a KOL"),
        field("email", pa.string(), "Recipient email address (lower case)"),
        field("occurred_at", TIMESTAMP, "Time of the open or click in the service (UTC)"),
        field("received_at", TIMESTAMP, "Time the receiver stored the event (UTC)"),
    ]
)

# One row per webhook event the incremental job settled: applied, or quarantined (every kind, known or not).
WEBHOOK_EVENTS = pa.schema(
    [
        field("id", pa.string(), "Webhook event identifier (wh_evt_...), the same on every redelivery"),
        field("event", pa.string(), "Event name, e.g. kol.updated (part 6 of the spec)"),
        field(
            "created_at", TIMESTAMP,
            "Time the service created the event (envelope created_at, UTC; one sent without zone designator is UTC); "
            "NULL when unreadable (the event is quarantined)",
        ),
        field("received_at", TIMESTAMP, "Time the receiver stored the event durably (UTC)"),
        field("organization_id", pa.string(), "Owning organization (org_...)"),
        pa.field(
            "data", pa.string(), nullable=True,
            metadata={"description": "The event's data object as sent (JSON); NULL when the body cannot be read", "json": "true"},
        ),
        field("known_event", pa.bool_(), "False for an event name outside part 6 of the spec (recorded, not applied)"),
        field("attempts", pa.int64(), "Failed applications before this row was written (a quarantined event's included)"),
        field("applied_at", TIMESTAMP, "Time the incremental job committed this event's changes (UTC); NULL when quarantined"),
        field("run_id", pa.string(), "Dagster run that wrote this row (job apply_webhook_events)"),
        field(
            "status", pa.string(),
            "applied, or quarantined: set aside with its error after failing COMMOPS_EVENTS_MAX_ATTEMPTS times or "
            "because it can never be applied; `commops events retry` puts it back",
        ),
        field("error", pa.string(), "Why a quarantined event was set aside (one line); NULL when applied"),
    ]
)
