"""Every event kind reaches a subscribed receiver from the change that causes it.

API creates go through HTTP; the other changes go through the store functions that the
activity simulator (and any future endpoint) uses; a simulator run closes the loop. The
service's own delivery worker (started by `commops service run`'s app) does the sending.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from commops_spec.constants import EVENTS
from service.simulator import Simulator
from service.store import activity, campaigns, kols, signals
from service.store.db import connect, transaction
from tests.service.webhook_support import Receiver, WebhookService, wait_until, webhook_service


@pytest.fixture(scope="module")
def api(tmp_path_factory, rx) -> Iterator[WebhookService]:
    with webhook_service(tmp_path_factory.mktemp("webhooks-events") / "service.db") as service:
        with service.client() as client:
            response = client.post("/webhooks", json={"url": rx.url("/all"), "events": list(EVENTS)})
            assert response.status_code == 201
        yield service


def arrived(rx: Receiver, event: str, value: str, key: str = "id") -> list[dict[str, Any]]:
    """Payloads of `event` at /all whose data[key] is `value`, waiting until one arrived."""

    def matching() -> list[dict[str, Any]]:
        payloads = (r.json() for r in rx.at("/all"))
        return [p for p in payloads if p["event"] == event and p["data"].get(key) == value]

    return wait_until(matching)


def in_transaction(api: WebhookService, change, *args: Any) -> Any:
    conn = connect(api.db)
    try:
        with transaction(conn):
            return change(conn, api.org_id, *args)
    finally:
        conn.close()


def test_api_creates_emit_kol_created_and_campaign_created_with_the_api_shape(api, rx):
    with api.client() as client:
        kol = client.post(
            "/kols",
            json={"full_name": "Dr. Amara Okafor", "specialties": ["cardiology"], "email": "amara@example.org"},
        ).json()["data"]
        campaign = client.post(
            "/campaigns",
            json={
                "name": "TAVR 5-year data",
                "type": "product_update",
                "audience": {"kol_ids": [kol["id"]]},
                "email": {"subject": "Hello {{first_name}}", "body_html": "<p>New data</p>"},
            },
        ).json()["data"]

    [kol_event] = arrived(rx, "kol.created", kol["id"])
    assert kol_event["data"] == kol
    assert kol_event["id"].startswith("wh_evt_") and kol_event["organization_id"] == api.org_id
    [campaign_event] = arrived(rx, "campaign.created", campaign["id"])
    assert {k: campaign_event["data"][k] for k in campaign} == campaign
    assert campaign_event["data"]["status"] == "draft"


def test_kol_changes_emit_updated_tier_changed_and_archived(api, rx):
    kol = in_transaction(api, kols.create_kol, {"full_name": "Dr. Lena Vogel", "specialties": ["neurosurgery"]}, None)
    in_transaction(api, kols.update_kol, kol["id"], {"institution": "Charité – Universitätsmedizin Berlin"})
    in_transaction(api, kols.change_tier, kol["id"], "tier_1")
    in_transaction(api, kols.archive_kol, kol["id"])

    [updated] = arrived(rx, "kol.updated", kol["id"])
    assert updated["data"]["institution"] == "Charité – Universitätsmedizin Berlin"
    [tiered] = arrived(rx, "kol.tier_changed", kol["id"])
    assert tiered["data"]["tier"] == "tier_1" and tiered["data"]["previous_tier"] == "tier_3"
    [archived] = arrived(rx, "kol.archived", kol["id"])
    assert archived["data"]["is_archived"] is True


def test_campaign_send_open_and_click_emit_their_events(api, rx):
    kol = in_transaction(
        api, kols.create_kol, {"full_name": "Dr. Yuki Tanaka", "specialties": ["cardiology"], "email": "yuki@example.jp"},
        None,
    )
    campaign = in_transaction(
        api,
        campaigns.create_campaign,
        {
            "name": "Congress invitation",
            "type": "event_invitation",
            "audience": {"kol_ids": [kol["id"]]},
            "email": {"subject": "Join us", "body_html": "<p>Invitation</p>"},
        },
    )
    in_transaction(api, campaigns.set_campaign_status, campaign["id"], "active")
    in_transaction(api, campaigns.record_open, campaign["id"], "yuki@example.jp")
    in_transaction(api, campaigns.record_click, campaign["id"], "yuki@example.jp")

    [sent] = arrived(rx, "campaign.sent", campaign["id"])
    assert sent["data"]["status"] == "active" and sent["data"]["sent_at"]
    [opened] = arrived(rx, "campaign.email_opened", campaign["id"], "campaign_id")
    [clicked] = arrived(rx, "campaign.link_clicked", campaign["id"], "campaign_id")
    assert opened["data"]["kol_id"] == clicked["data"]["kol_id"] == kol["id"]


@pytest.mark.parametrize(("level", "high_impact"), [("low", False), ("medium", False), ("high", True), ("critical", True)])
def test_signal_ingestion_emits_signal_new_and_high_impact_for_high_and_critical(api, rx, level, high_impact):
    signal = in_transaction(
        api,
        signals.ingest_signal,
        {
            "title": f"FDA safety communication ({level})",
            "source_key": "fda",
            "source": {"name": "FDA", "country": "US", "region": "North America"},
            "impact": {"level": level, "score": 50, "categories": ["safety"]},
            "sentiment": "negative",
        },
    )
    [new] = arrived(rx, "signal.new", signal["id"])
    assert new["data"] == signal
    if high_impact:
        [high] = arrived(rx, "signal.high_impact", signal["id"])
        assert high["data"]["impact"]["level"] == level
    else:
        conn = connect(api.db)
        emitted = conn.execute(
            "SELECT count(*) FROM webhook_events WHERE event = 'signal.high_impact' AND instr(payload, ?) > 0",
            (signal["id"].encode(),),
        ).fetchone()[0]
        conn.close()
        assert emitted == 0


def test_event_and_attendee_changes_emit_the_event_kinds(api, rx):
    kol = in_transaction(api, kols.create_kol, {"full_name": "Dr. Priya Raman", "specialties": ["cardiology"]}, None)
    event = in_transaction(
        api, activity.create_event, {"name": "ESC Congress dinner", "type": "dinner_meeting", "date": "2027-08-30"}
    )
    in_transaction(api, activity.update_event, event["id"], {"date": "2027-08-31"})
    in_transaction(api, activity.add_attendee, event["id"], kol["id"], "speaker")
    in_transaction(api, activity.update_rsvp, event["id"], kol["id"], "accepted")
    in_transaction(api, activity.cancel_event, event["id"])

    for name in ("event.created", "event.updated", "event.cancelled"):
        assert arrived(rx, name, event["id"]), name
    [added] = arrived(rx, "event.attendee_added", event["id"], "event_id")
    assert added["data"]["kol_id"] == kol["id"] and added["data"]["role"] == "speaker"
    [rsvp] = arrived(rx, "event.rsvp_updated", event["id"], "event_id")
    assert rsvp["data"]["rsvp_status"] == "accepted"


def test_every_event_the_simulator_causes_is_delivered_exactly_as_stored(api, rx):
    conn = connect(api.db)
    before = conn.execute("SELECT coalesce(max(seq), 0) FROM webhook_events").fetchone()[0]
    simulator = Simulator(api.db, api.org_id, per_second=1, random_seed=7)
    try:
        for _ in range(150):
            simulator.step()
    finally:
        simulator.stop()
    stored = {
        row["id"]: bytes(row["payload"])
        for row in conn.execute("SELECT id, payload FROM webhook_events WHERE seq > ?", (before,))
    }
    conn.close()
    assert len(stored) > 20
    wait_until(lambda: stored.keys() <= {r.headers["webhook-id"] for r in rx.at("/all")}, timeout=15)
    bodies = {r.headers["webhook-id"]: r.body for r in rx.at("/all") if r.headers["webhook-id"] in stored}
    assert bodies == stored
    kinds = {payload.split(b'"event":"', 1)[1].split(b'"', 1)[0].decode() for payload in stored.values()}
    assert {"kol.updated", "signal.new"} <= kinds and any(kind.startswith("event.") for kind in kinds)
