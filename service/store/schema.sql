-- Commercial Operations Service storage (SQLite).
-- Every SQL statement of the service lives under service/store/; this file is the schema.
-- Timestamps are ISO 8601 UTC strings with a trailing Z and microseconds
-- ("2026-11-22T13:45:00.123456Z"), so that text order is time order.
-- Arrays and small objects are JSON text columns.

PRAGMA foreign_keys = ON;

CREATE TABLE IF NOT EXISTS organizations (
    id           TEXT PRIMARY KEY,            -- org_...
    name         TEXT NOT NULL,
    plan         TEXT NOT NULL CHECK (plan IN ('starter', 'professional', 'enterprise')),
    owner_email  TEXT,                        -- receives webhook failure emails
    created_at   TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS api_keys (
    id           TEXT PRIMARY KEY,            -- key_...
    org_id       TEXT NOT NULL REFERENCES organizations(id),
    key_hash     TEXT NOT NULL UNIQUE,        -- sha256 hex of the full key; the key itself is never stored
    key_prefix   TEXT NOT NULL,               -- first characters, for listing
    scopes       TEXT NOT NULL,               -- comma-separated
    created_at   TEXT NOT NULL,
    revoked_at   TEXT
);

CREATE TABLE IF NOT EXISTS kols (
    id                  TEXT PRIMARY KEY,     -- kol_...
    org_id              TEXT NOT NULL REFERENCES organizations(id),
    full_name           TEXT NOT NULL,
    title               TEXT,
    institution         TEXT,
    department          TEXT,
    specialties         TEXT NOT NULL DEFAULT '[]',
    expertise_areas     TEXT NOT NULL DEFAULT '[]',
    research_interests  TEXT NOT NULL DEFAULT '[]',
    tier                TEXT NOT NULL DEFAULT 'tier_3',
    email               TEXT,
    email_lower         TEXT,                 -- for the case-insensitive uniqueness rule
    phone               TEXT,
    street              TEXT,
    city                TEXT,
    state               TEXT,
    postal_code         TEXT,
    country             TEXT,
    bio                 TEXT,
    notes               TEXT,
    tags                TEXT NOT NULL DEFAULT '[]',
    linkedin            TEXT,
    twitter             TEXT,
    is_archived         INTEGER NOT NULL DEFAULT 0,
    -- Derived fields, maintained by service/store/metrics.py whenever their inputs change.
    engagement_level    TEXT NOT NULL DEFAULT 'low',
    event_count         INTEGER NOT NULL DEFAULT 0,
    last_interaction    TEXT,
    total_campaigns     INTEGER NOT NULL DEFAULT 0,
    email_open_rate     REAL NOT NULL DEFAULT 0,
    response_rate       REAL NOT NULL DEFAULT 0,
    h_index             INTEGER NOT NULL DEFAULT 0,
    publications_count  INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    search_text         TEXT NOT NULL DEFAULT ''  -- folded full_name, institution, email (service/store/search.py)
);
CREATE UNIQUE INDEX IF NOT EXISTS kols_org_email ON kols (org_id, email_lower) WHERE email_lower IS NOT NULL;
CREATE INDEX IF NOT EXISTS kols_org_created ON kols (org_id, is_archived, created_at, id);
CREATE INDEX IF NOT EXISTS kols_org_updated ON kols (org_id, is_archived, updated_at, id);
CREATE INDEX IF NOT EXISTS kols_org_name ON kols (org_id, is_archived, full_name, id);

-- Meetings and congresses ("events" in the spec's scopes and event names).
CREATE TABLE IF NOT EXISTS events (
    id           TEXT PRIMARY KEY,            -- evt_...
    org_id       TEXT NOT NULL REFERENCES organizations(id),
    name         TEXT NOT NULL,
    type         TEXT NOT NULL,               -- congress, advisory_board, webinar, dinner_meeting, workshop
    date         TEXT NOT NULL,               -- YYYY-MM-DD
    city         TEXT,
    country      TEXT,
    status       TEXT NOT NULL DEFAULT 'scheduled',  -- scheduled, completed, cancelled
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_org ON events (org_id, date);

CREATE TABLE IF NOT EXISTS event_attendees (
    event_id     TEXT NOT NULL REFERENCES events(id),
    kol_id       TEXT NOT NULL REFERENCES kols(id),
    org_id       TEXT NOT NULL,
    role         TEXT NOT NULL,               -- speaker, moderator, attendee, panelist, chair
    rsvp_status  TEXT NOT NULL DEFAULT 'invited',  -- invited, accepted, declined, tentative
    attended     INTEGER NOT NULL DEFAULT 0,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (event_id, kol_id)
);
CREATE INDEX IF NOT EXISTS event_attendees_kol ON event_attendees (kol_id);

CREATE TABLE IF NOT EXISTS interactions (
    id           TEXT PRIMARY KEY,            -- int_...
    org_id       TEXT NOT NULL,
    kol_id       TEXT NOT NULL REFERENCES kols(id),
    type         TEXT NOT NULL,               -- meeting, call, email, congress_visit, advisory_input
    occurred_at  TEXT NOT NULL,
    summary      TEXT,
    responded    INTEGER NOT NULL DEFAULT 0   -- the KOL answered (feeds response_rate)
);
CREATE INDEX IF NOT EXISTS interactions_kol ON interactions (kol_id, occurred_at);

CREATE TABLE IF NOT EXISTS publications (
    id           TEXT PRIMARY KEY,            -- pub_...
    org_id       TEXT NOT NULL,
    kol_id       TEXT NOT NULL REFERENCES kols(id),
    title        TEXT NOT NULL,
    journal      TEXT,
    year         INTEGER,
    citations    INTEGER NOT NULL DEFAULT 0,
    doi          TEXT
);
CREATE INDEX IF NOT EXISTS publications_kol ON publications (kol_id);

CREATE TABLE IF NOT EXISTS product_lines (
    id           TEXT PRIMARY KEY,            -- pl_...
    org_id       TEXT NOT NULL REFERENCES organizations(id),
    name         TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS products (
    id                 TEXT PRIMARY KEY,      -- prod_...
    org_id             TEXT NOT NULL REFERENCES organizations(id),
    name               TEXT NOT NULL,
    description        TEXT,
    product_line_id    TEXT REFERENCES product_lines(id),
    status             TEXT NOT NULL,
    regulatory_status  TEXT,
    target_markets     TEXT NOT NULL DEFAULT '[]',
    key_features       TEXT NOT NULL DEFAULT '[]',
    specifications     TEXT NOT NULL DEFAULT '[]',
    market_status      TEXT NOT NULL DEFAULT '{}',
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    search_text        TEXT NOT NULL DEFAULT ''  -- folded name, description (service/store/search.py)
);
CREATE INDEX IF NOT EXISTS products_org_created ON products (org_id, created_at, id);

CREATE TABLE IF NOT EXISTS campaigns (
    id              TEXT PRIMARY KEY,         -- cmp_...
    org_id          TEXT NOT NULL REFERENCES organizations(id),
    name            TEXT NOT NULL,
    description     TEXT,
    type            TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'draft',
    audience        TEXT NOT NULL,            -- JSON of the request's audience object
    email           TEXT NOT NULL,            -- JSON: subject, body_html, from_name, reply_to, body_text
    products        TEXT NOT NULL DEFAULT '[]',
    schedule        TEXT NOT NULL,            -- JSON: type, send_at
    audience_count  INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    sent_at         TEXT,
    search_text     TEXT NOT NULL DEFAULT ''  -- folded name (service/store/search.py)
);
CREATE INDEX IF NOT EXISTS campaigns_org_created ON campaigns (org_id, created_at, id);

-- One row per resolved recipient; campaign list metrics are aggregated from these.
CREATE TABLE IF NOT EXISTS campaign_recipients (
    campaign_id   TEXT NOT NULL REFERENCES campaigns(id),
    email_lower   TEXT NOT NULL,
    org_id        TEXT NOT NULL,
    kol_id        TEXT,                       -- NULL for external contacts
    sent_at       TEXT,
    delivered_at  TEXT,
    opened_at     TEXT,
    clicked_at    TEXT,
    PRIMARY KEY (campaign_id, email_lower)
);
CREATE INDEX IF NOT EXISTS campaign_recipients_kol ON campaign_recipients (kol_id);

CREATE TABLE IF NOT EXISTS signals (
    id                 TEXT PRIMARY KEY,      -- sig_...
    org_id             TEXT NOT NULL REFERENCES organizations(id),
    title              TEXT NOT NULL,
    url                TEXT,
    source_key         TEXT NOT NULL,         -- the filter token: fda, ema, nmpa, pmda, tga, health_canada, mhra, industry
    source_name        TEXT NOT NULL,
    source_country     TEXT,
    source_region      TEXT,
    content            TEXT,
    ai_summary         TEXT,
    impact_level       TEXT NOT NULL,
    impact_score       REAL NOT NULL,
    impact_categories  TEXT NOT NULL DEFAULT '[]',
    sentiment          TEXT NOT NULL,
    product_relevance  TEXT NOT NULL DEFAULT '[]',
    is_read            INTEGER NOT NULL DEFAULT 0,
    is_bookmarked      INTEGER NOT NULL DEFAULT 0,
    published_at       TEXT NOT NULL,
    fetched_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    search_text        TEXT NOT NULL DEFAULT ''  -- folded title, content (service/store/search.py)
);
CREATE INDEX IF NOT EXISTS signals_org_published ON signals (org_id, published_at, id);
CREATE INDEX IF NOT EXISTS signals_org_fetched ON signals (org_id, fetched_at, id);
CREATE INDEX IF NOT EXISTS signals_org_read ON signals (org_id, is_read);

CREATE TABLE IF NOT EXISTS signal_products (
    signal_id    TEXT NOT NULL REFERENCES signals(id),
    product_id   TEXT NOT NULL,
    org_id       TEXT NOT NULL,
    PRIMARY KEY (signal_id, product_id)
);
CREATE INDEX IF NOT EXISTS signal_products_product ON signal_products (org_id, product_id);

-- Outbox: one row per emitted event, written in the same transaction as the change
-- that caused it. payload holds the exact JSON bytes that deliveries send and sign.
CREATE TABLE IF NOT EXISTS webhook_events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,        -- wh_evt_...
    org_id       TEXT NOT NULL,
    event        TEXT NOT NULL,
    payload      BLOB NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_events_org ON webhook_events (org_id, seq);

-- ===== Webhooks: registrations, deliveries and attempts (owned by service/store/webhooks.py and deliveries.py) =====
-- A delivery is one event for one webhook; emit() fans events out into deliveries in the
-- transaction of the change. Delivery status: pending (due at next_attempt_at), held (the
-- webhook is disabled or failed; resumes on reactivation), delivered, failed (retries
-- exhausted), cancelled (webhook deleted).
CREATE TABLE IF NOT EXISTS webhooks (
    id                   TEXT PRIMARY KEY,    -- wh_...
    org_id               TEXT NOT NULL REFERENCES organizations(id),
    url                  TEXT NOT NULL,
    events               TEXT NOT NULL,       -- JSON array of event names
    secret               TEXT NOT NULL,       -- HMAC key; returned only by the create response
    enabled              INTEGER NOT NULL DEFAULT 1,
    status               TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failed')),
    failed_at            TEXT,
    failure_reason       TEXT,
    notify_pending       INTEGER NOT NULL DEFAULT 0,  -- a failure email is owed for the current episode
    notified_at          TEXT,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    deleted_at           TEXT
);
CREATE INDEX IF NOT EXISTS webhooks_org ON webhooks (org_id, created_at, id);

CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id                TEXT PRIMARY KEY,       -- whd_...
    webhook_id        TEXT NOT NULL REFERENCES webhooks(id),
    org_id            TEXT NOT NULL,
    event_seq         INTEGER REFERENCES webhook_events(seq),  -- NULL for test deliveries
    event_id          TEXT NOT NULL,          -- wh_evt_..., also the webhook-id header
    event             TEXT NOT NULL,
    test_payload      BLOB,                   -- the body of a test delivery (not in the outbox)
    status            TEXT NOT NULL CHECK (status IN ('pending', 'held', 'delivered', 'failed', 'cancelled')),
    attempts          INTEGER NOT NULL DEFAULT 0,  -- all attempts ever made (numbering of the log)
    failures          INTEGER NOT NULL DEFAULT 0,  -- failed attempts in the current retry schedule
    next_attempt_at   TEXT,
    lease_owner       TEXT,
    lease_until       TEXT,
    last_status_code  INTEGER,
    last_error        TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    delivered_at      TEXT
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (status, webhook_id, next_attempt_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at, id);

CREATE TABLE IF NOT EXISTS webhook_attempts (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id       TEXT NOT NULL REFERENCES webhook_deliveries(id),
    webhook_id        TEXT NOT NULL,
    number            INTEGER NOT NULL,       -- 1 = first attempt, 2 = first retry, ...
    started_at        TEXT NOT NULL,
    status_code       INTEGER,
    error             TEXT,
    latency_ms        REAL NOT NULL,
    response_excerpt  TEXT
);
CREATE INDEX IF NOT EXISTS webhook_attempts_delivery ON webhook_attempts (delivery_id, number);
-- ===== end of webhooks =====
