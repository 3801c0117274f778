"""A real service on a free loopback port, over a small dataset built by hand.

The dataset is written through the store modules (the same code paths as the API)
plus plain inserts for the tables that have no store writer of their own (events,
attendance, interactions, publications); metrics are then recomputed as the
service does.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store import campaigns, kols, metrics, orgs, products, signals
from service.store.db import connect, init_db, transaction
from tests.service.webhook_support import rx  # noqa: F401  (a receiver fixture shared by the webhook test modules)

TEST_KOL_LIMITS = {"starter": 3, "professional": 25_000, "enterprise": None}


@dataclass
class Dataset:
    db: Path
    org: str
    key: str  # every scope
    other_org: str
    other_key: str
    other_kol: str
    read_only_key: str  # kols:read only
    revoked_key: str
    limited_org: str  # starter plan, KOL limit 3 in these tests
    limited_key: str
    sized: dict[int, tuple[str, str]] = field(default_factory=dict)  # n KOLs -> (org, key)
    kol: dict[str, str] = field(default_factory=dict)  # label -> id
    product: dict[str, str] = field(default_factory=dict)
    product_line: str = ""
    signal: dict[str, str] = field(default_factory=dict)
    campaign: dict[str, str] = field(default_factory=dict)


KOL_ROWS = {
    # label: (tier, specialties, tags, email, institution, city, country)
    "ana": ("tier_1", ["cardiology", "interventional_cardiology"], ["advisor", "speaker"], "Ana.Lopez@example.com",
            "Hospital Clinic", "Barcelona", "ES"),
    "ben": ("tier_2", ["cardiology"], ["speaker"], "ben.okafor@example.com", "Charite", "Berlin", "DE"),
    "chen": ("tier_3", ["electrophysiology"], ["researcher"], "chen.wei@example.com", "Peking Union", "Beijing", "CN"),
    "dora": ("tier_2", ["radiology"], [], None, "Mayo Clinic", "Rochester", "US"),
    "eli": ("tier_3", ["cardiac_surgery"], ["advisor"], "eli.sato@example.com", "Keio", "Tokyo", "JP"),
}


def _add_kol(conn, org_id: str, label: str, row: tuple) -> str:
    tier, specialties, tags, email, institution, city, country = row
    fields = {"full_name": f"Dr {label.title()} Example", "specialties": specialties, "tags": tags, "tier": tier,
              "institution": institution, "title": "MD", "department": "Cardiology",
              "location": {"city": city, "state": None, "country": country}, "phone": "+1 555 0100",
              "bio": f"Bio of {label}", "social": {"linkedin": f"https://linkedin.example/{label}", "twitter": f"@{label}"}}
    if email:
        fields["email"] = email
    return kols.create_kol(conn, org_id, fields, None)["id"]


def _build(db: Path) -> Dataset:
    init_db(db)
    conn = connect(db)
    org = orgs.create_org(conn, "Acme Medical", "enterprise", "owner@acme.example")
    other_org = orgs.create_org(conn, "Other Co", "professional")
    limited_org = orgs.create_org(conn, "Small Co", "starter")
    data = Dataset(
        db=db, org=org, key=orgs.create_key(conn, org, "all")[1],
        other_org=other_org, other_key=orgs.create_key(conn, other_org, "all")[1], other_kol="",
        read_only_key=orgs.create_key(conn, org, ["kols:read"])[1], revoked_key="",
        limited_org=limited_org, limited_key=orgs.create_key(conn, limited_org, "all")[1],
    )
    revoked_id, data.revoked_key = orgs.create_key(conn, org, "all")
    orgs.revoke_key(conn, revoked_id)

    with transaction(conn):
        for label, row in KOL_ROWS.items():
            data.kol[label] = _add_kol(conn, org, label, row)
        data.kol["archived"] = _add_kol(conn, org, "zed", ("tier_1", ["cardiology"], ["advisor"],
                                                          "zed@example.com", "Old Hospital", "Lyon", "FR"))
        kols.archive_kol(conn, org, data.kol["archived"])
        data.other_kol = _add_kol(conn, other_org, "olga", ("tier_1", ["cardiology"], ["advisor"],
                                                            "olga@other.example", "Other", "Oslo", "NO"))
        _add_activity(conn, org, data)

        data.product["stent"] = products.create_product(conn, org, {
            "name": "FlowStent X", "description": "Drug-eluting coronary stent", "status": "active",
            "product_line": {"name": "Coronary"}, "regulatory_status": "FDA approved",
            "target_markets": ["US", "EU"], "key_features": ["thin struts"],
            "specifications": [{"name": "diameter", "value": "2.5-4.0 mm"}],
            "market_status": {"US": {"status": "approved", "clearance_number": "P210001"},
                              "EU": {"status": "approved", "ce_mark": True}},
        })["id"]
        data.product["valve"] = products.create_product(conn, org, {
            "name": "AeroValve", "description": "Transcatheter valve", "status": "in_development",
            "product_line": {"name": "Structural Heart"}, "target_markets": ["CN", "JP"],
            "market_status": {"CN": {"status": "under_review"}},
        })["id"]
        data.product["old"] = products.create_product(conn, org, {
            "name": "Legacy Pump", "description": "Old pump", "status": "discontinued",
            "product_line": {"name": "Coronary"}, "target_markets": ["IN"],
        })["id"]
        data.product_line = products.get_product(conn, org, data.product["stent"])["product_line"]["id"]

        base = {"url": "https://example.org/s", "content": "Full text", "ai_summary": "Summary",
                "source": {"name": "FDA", "country": "US", "region": "North America"}}
        data.signal["fda_high"] = signals.ingest_signal(conn, org, {
            **base, "title": "FDA recall of stents", "source_key": "fda", "sentiment": "negative",
            "impact": {"level": "high", "score": 82, "categories": ["recall"]},
            "product_relevance": [{"product_id": data.product["stent"], "product_name": "FlowStent X",
                                   "relevance_type": "direct", "relevance_score": 0.9}],
            "published_at": "2026-03-01T10:00:00.000000Z", "is_bookmarked": True})["id"]
        data.signal["ema_low"] = signals.ingest_signal(conn, org, {
            **base, "title": "EMA guidance update", "source_key": "ema", "sentiment": "neutral",
            "source": {"name": "EMA", "country": "NL", "region": "Europe"},
            "impact": {"level": "low", "score": 12, "categories": ["guidance"]},
            "published_at": "2026-02-01T10:00:00.000000Z", "is_read": True})["id"]
        data.signal["industry"] = signals.ingest_signal(conn, org, {
            **base, "title": "Competitor launches valve", "source_key": "industry", "sentiment": "positive",
            "content": "A transcatheter valve launch", "source": {"name": "Industry news", "country": None,
                                                                 "region": None},
            "impact": {"level": "critical", "score": 95, "categories": ["competition"]},
            "product_relevance": [{"product_id": data.product["valve"], "product_name": "AeroValve",
                                   "relevance_type": "competitive", "relevance_score": 0.7}],
            "published_at": "2026-04-01T10:00:00.000000Z"})["id"]

        email = {"subject": "Hello {{first_name}}", "body_html": "<p>Hi {{full_name}}</p>", "from_name": "Acme"}
        data.campaign["sent"] = campaigns.create_campaign(conn, org, {
            "name": "Stent launch", "description": "Launch mail", "type": "new_product_launch",
            "audience": {"kol_ids": [data.kol["ana"], data.kol["ben"]], "external_contacts": ["x@partner.example"]},
            "email": email, "products": [data.product["stent"]]})["id"]
        campaigns.set_campaign_status(conn, org, data.campaign["sent"], "active")
        campaigns.record_open(conn, org, data.campaign["sent"], "ana.lopez@example.com")
        campaigns.record_click(conn, org, data.campaign["sent"], "ana.lopez@example.com")
        campaigns.record_open(conn, org, data.campaign["sent"], "ben.okafor@example.com")
        data.campaign["draft"] = campaigns.create_campaign(conn, org, {
            "name": "Spring newsletter", "type": "newsletter",
            "audience": {"filters": {"tier": ["tier_1", "tier_2"]}}, "email": email})["id"]
        data.campaign["paused"] = campaigns.create_campaign(conn, org, {
            "name": "Congress invite", "type": "event_invitation",
            "audience": {"external_contacts": ["y@partner.example"]}, "email": email})["id"]
        campaigns.set_campaign_status(conn, org, data.campaign["paused"], "active")
        campaigns.set_campaign_status(conn, org, data.campaign["paused"], "paused")

    for size in (0, 1, 100, 101):
        sized_org = orgs.create_org(conn, f"Sized {size}", "enterprise")
        with transaction(conn):
            for i in range(size):
                kols.create_kol(conn, sized_org, {"full_name": f"Person {i:03d}", "specialties": ["cardiology"]},
                                None)
        data.sized[size] = (sized_org, orgs.create_key(conn, sized_org, ["kols:read"])[1])
    conn.close()
    return data


def _add_activity(conn, org: str, data: Dataset) -> None:
    """Events, attendance, interactions and publications for ana (highly engaged) and ben."""
    ana, ben = data.kol["ana"], data.kol["ben"]
    now = "2026-01-01T00:00:00.000000Z"
    for i, (day, role) in enumerate((("2026-01-10", "speaker"), ("2026-02-10", "attendee"), ("2026-03-10", "chair"))):
        event_id = f"evt_test{i}"
        conn.execute("INSERT INTO events (id, org_id, name, type, date, status, created_at, updated_at) "
                     "VALUES (?, ?, ?, 'congress', ?, 'completed', ?, ?)", (event_id, org, f"Congress {i}", day, now, now))
        conn.execute("INSERT INTO event_attendees (event_id, kol_id, org_id, role, rsvp_status, attended, updated_at) "
                     "VALUES (?, ?, ?, ?, 'accepted', 1, ?)", (event_id, ana, org, role, now))
    conn.execute("INSERT INTO event_attendees (event_id, kol_id, org_id, role, rsvp_status, attended, updated_at) "
                 "VALUES ('evt_test0', ?, ?, 'attendee', 'declined', 0, ?)", (ben, org, now))
    for i in range(4):
        conn.execute("INSERT INTO interactions (id, org_id, kol_id, type, occurred_at, summary, responded) "
                     "VALUES (?, ?, ?, 'call', ?, 'Follow-up', ?)",
                     (f"int_test{i}", org, ana, f"2026-04-0{i + 1}T12:00:00.000000Z", 1 if i % 2 == 0 else 0))
    for i, cites in enumerate((10, 8, 3, 1)):
        conn.execute("INSERT INTO publications (id, org_id, kol_id, title, journal, year, citations, doi) "
                     "VALUES (?, ?, ?, ?, 'EuroIntervention', ?, ?, ?)",
                     (f"pub_test{i}", org, ana, f"Paper {i}", 2020 + i, cites, f"10.1000/{i}"))
    metrics.refresh_kol_metrics(conn, [ana, ben])


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Dataset:
    return _build(tmp_path_factory.mktemp("service") / "service.db")


@pytest.fixture(scope="session")
def server(dataset: Dataset):
    # Request rate limits stay off here (headers are still sent): a whole test session
    # and schemathesis exceed an enterprise minute. The limit tests run their own server.
    settings = ServiceSettings(db=dataset.db, rate_limits_enabled=False, kol_limits=TEST_KOL_LIMITS)
    with ServiceServer(settings) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="session")
def api(server: ServiceServer, dataset: Dataset):
    """A client of the main organization with every scope."""
    with httpx.Client(base_url=server.base_url, headers=bearer(dataset.key), timeout=10) as client:
        yield client


@pytest.fixture
def unique_email() -> str:
    return f"kol-{uuid.uuid4().hex[:10]}@example.com"


def data_of(response: httpx.Response, status: int = 200):
    assert response.status_code == status, response.text
    return response.json()["data"]


def error_of(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]["details"]


def dump(obj) -> str:
    return json.dumps(obj, indent=2)
