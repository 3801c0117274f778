"""The store's mutations (used by the API, the simulator and webhooks) emit their events
in the same transaction and move updated_at."""

from __future__ import annotations

import json

import pytest

from service.store import campaigns, kols, orgs, signals
from service.store.db import connect, init_db, transaction


@pytest.fixture
def conn(tmp_path):
    db = tmp_path / "events.db"
    init_db(db)
    connection = connect(db)
    yield connection
    connection.close()


def events(conn) -> list[tuple[str, dict]]:
    return [(row["event"], json.loads(row["payload"])["data"])
            for row in conn.execute("SELECT event, payload FROM webhook_events ORDER BY seq")]


def test_kol_mutations_emit_their_events_with_the_flat_shape(conn):
    org = orgs.create_org(conn, "Org", "enterprise")
    with transaction(conn):
        created = kols.create_kol(conn, org, {"full_name": "Dr A", "specialties": ["cardiology"],
                                              "email": "a@x.example"}, None)
    with transaction(conn):
        updated = kols.update_kol(conn, org, created["id"], {"institution": "New Hospital",
                                                             "location": {"city": "Paris", "country": "FR"}})
    with transaction(conn):
        tiered = kols.change_tier(conn, org, created["id"], "tier_1")
    with transaction(conn):
        archived = kols.archive_kol(conn, org, created["id"])
    names = [name for name, _ in events(conn)]
    assert names == ["kol.created", "kol.updated", "kol.tier_changed", "kol.archived"]
    assert events(conn)[0][1] == created and events(conn)[1][1] == updated
    assert tiered["previous_tier"] == "tier_3" and tiered["tier"] == "tier_1"
    assert archived["is_archived"] is True
    assert created["updated_at"] < updated["updated_at"] < tiered["updated_at"] < archived["updated_at"]
    assert updated["location"] == {"city": "Paris", "state": None, "country": "FR"}


def test_a_failed_transaction_emits_nothing(conn):
    org = orgs.create_org(conn, "Org", "enterprise")
    with transaction(conn):
        kols.create_kol(conn, org, {"full_name": "Dr A", "specialties": ["x"], "email": "a@x.example"}, None)
    with pytest.raises(kols.DuplicateEmail), transaction(conn):
        kols.create_kol(conn, org, {"full_name": "Dr B", "specialties": ["x"], "email": "A@X.example"}, None)
    assert [name for name, _ in events(conn)] == ["kol.created"]


def test_campaign_sending_opens_and_clicks_emit_events_and_update_metrics(conn):
    org = orgs.create_org(conn, "Org", "enterprise")
    with transaction(conn):
        kol = kols.create_kol(conn, org, {"full_name": "Dr A", "specialties": ["x"], "email": "a@x.example"}, None)
        campaign = campaigns.create_campaign(conn, org, {
            "name": "C", "type": "newsletter", "audience": {"kol_ids": [kol["id"]]},
            "email": {"subject": "Hi", "body_html": "<p>x</p>"}})
    with transaction(conn):
        sent = campaigns.set_campaign_status(conn, org, campaign["id"], "active")
        assert campaigns.record_open(conn, org, campaign["id"], "a@x.example")
        assert campaigns.record_click(conn, org, campaign["id"], "a@x.example")
        assert not campaigns.record_open(conn, org, campaign["id"], "a@x.example")  # already opened
    with pytest.raises(campaigns.InvalidTransition), transaction(conn):
        campaigns.set_campaign_status(conn, org, campaign["id"], "draft")
    assert [name for name, _ in events(conn)] == ["kol.created", "campaign.created", "campaign.sent",
                                                   "campaign.email_opened", "campaign.link_clicked"]
    assert sent["sent_at"] is not None and sent["metrics"]["delivered"] == 1
    detail = kols.get_kol_detail(conn, org, kol["id"])
    assert detail["metrics"]["total_campaigns"] == 1 and detail["metrics"]["email_open_rate"] == 1.0
    assert detail["last_interaction"] is not None


def test_high_impact_signals_emit_two_events(conn):
    org = orgs.create_org(conn, "Org", "enterprise")
    with transaction(conn):
        for level in ("low", "critical"):
            signals.ingest_signal(conn, org, {"title": level, "source_key": "fda", "sentiment": "neutral",
                                              "impact": {"level": level, "score": 50, "categories": []}})
    assert [name for name, _ in events(conn)] == ["signal.new", "signal.new", "signal.high_impact"]
