"""The webhook endpoints over real HTTP, with the service's own delivery worker running."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterator

import pytest

from tests.service.webhook_support import WebhookService, wait_until, webhook_service

KOL_BODY = {"full_name": "Dr. Hana Kobayashi", "specialties": ["electrophysiology"], "tier": "tier_2"}


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[WebhookService]:
    with webhook_service(tmp_path_factory.mktemp("webhooks-api") / "service.db") as service:
        yield service


def register(api: WebhookService, url: str, events: list[str], **extra) -> dict:
    with api.client() as client:
        response = client.post("/webhooks", json={"url": url, "events": events, **extra})
    assert response.status_code == 201, response.text
    return response.json()["data"]


def test_create_answers_201_with_the_secret_and_it_is_never_shown_again(api, rx):
    with api.client() as client:
        created = client.post(
            "/webhooks", json={"url": rx.url("/a"), "events": ["kol.created"], "secret": "my-own-secret-0123456789"}
        )
        listed = client.get("/webhooks").json()
        patched = client.patch(f"/webhooks/{created.json()['data']['id']}", json={"events": ["kol.updated"]})
    assert created.status_code == 201
    data = created.json()["data"]
    assert data["id"].startswith("wh_") and data["secret"] == "my-own-secret-0123456789"
    assert data["url"] == rx.url("/a") and data["events"] == ["kol.created"]
    assert data["enabled"] is True and data["status"] == "active"
    assert set(data) == {
        "id", "url", "events", "enabled", "status", "failed_at", "failure_reason", "created_at", "updated_at", "secret"
    }
    assert all("secret" not in item for item in listed["data"])
    assert listed["meta"]["total"] >= 1
    assert patched.status_code == 200 and "secret" not in patched.json()["data"]
    assert patched.json()["data"]["events"] == ["kol.updated"]


def test_a_strong_secret_is_generated_when_none_is_given(api, rx):
    first = register(api, rx.url("/gen"), ["kol.created"])
    second = register(api, rx.url("/gen"), ["kol.created"])
    assert re.fullmatch(r"[0-9a-f]{64}", first["secret"])
    assert first["secret"] != second["secret"]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"url": "ftp://example.com/hook", "events": ["kol.created"]}, "url", "invalid_url"),
        ({"url": "/relative/hook", "events": ["kol.created"]}, "url", "invalid_url"),
        ({"url": "https://user:pw@example.com/hook", "events": ["kol.created"]}, "url", "invalid_url"),
        ({"url": "https://example.com/hook", "events": []}, "events", "empty"),
        ({"url": "https://example.com/hook"}, "events", "missing"),
        ({"url": "https://example.com/hook", "events": ["kol.created"], "secret": "short"}, "secret", "invalid_length"),
        ({"url": "https://example.com/hook", "events": ["kol.created"], "enabled": False}, "enabled", "unknown_field"),
    ],
)
def test_invalid_registrations_are_refused_with_400_naming_the_field(api, body, field, reason):
    with api.client() as client:
        response = client.post("/webhooks", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["details"]["field"] == field and error["details"]["reason"] == reason


def test_unknown_event_names_are_all_listed_in_the_400(api):
    with api.client() as client:
        response = client.post(
            "/webhooks", json={"url": "https://example.com/h", "events": ["kol.created", "kol.deleted", "foo"]}
        )
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert details["reason"] == "unknown_event" and details["unknown"] == ["foo", "kol.deleted"]


def test_subscribing_needs_the_read_scope_of_each_event_group(api, rx):
    with api.client(api.kols_only_key) as client:
        refused = client.post("/webhooks", json={"url": rx.url("/s"), "events": ["kol.created", "signal.new"]})
        allowed = client.post("/webhooks", json={"url": rx.url("/s"), "events": ["kol.created"]})
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scope"] == "signals:read"
    assert allowed.status_code == 201


def test_another_organizations_webhook_is_not_found(api, rx):
    webhook = register(api, rx.url("/mine"), ["kol.created"])
    with api.client(api.other_key) as client:
        for response in (
            client.patch(f"/webhooks/{webhook['id']}", json={"enabled": False}),
            client.delete(f"/webhooks/{webhook['id']}"),
            client.post(f"/webhooks/{webhook['id']}/test", json={"event": "kol.created"}),
            client.get(f"/webhooks/{webhook['id']}/deliveries"),
        ):
            assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
        assert webhook["id"] not in {w["id"] for w in client.get("/webhooks").json()["data"]}


def test_the_test_endpoint_sends_a_signed_sample_now_and_answers_with_the_outcome(api, rx):
    webhook = register(api, rx.url("/test-ok"), ["signal.high_impact"])
    rx.behave("/test-bad", status=500)
    failing = register(api, rx.url("/test-bad"), ["kol.created"])
    with api.client() as client:
        ok = client.post(f"/webhooks/{webhook['id']}/test", json={"event": "kol.tier_changed"})
        bad = client.post(f"/webhooks/{failing['id']}/test", json={"event": "kol.created"})
        unknown = client.post(f"/webhooks/{webhook['id']}/test", json={"event": "kol.exploded"})
        log = client.get(f"/webhooks/{webhook['id']}/deliveries").json()["data"]

    outcome = ok.json()["data"]
    assert ok.status_code == 200
    assert outcome["success"] is True and outcome["status_code"] == 200 and outcome["attempt"] == 1
    assert outcome["latency_ms"] > 0 and outcome["error"] is None
    [got] = rx.at("/test-ok")
    assert hmac.compare_digest(
        got.headers["x-service-signature"], hmac.new(webhook["secret"].encode(), got.body, hashlib.sha256).hexdigest()
    )
    payload = got.json()
    assert payload["event"] == "kol.tier_changed" and payload["id"] == outcome["event_id"]
    assert payload["organization_id"] == api.org_id
    assert payload["data"]["id"].startswith("kol_") and payload["data"]["previous_tier"] in ("tier_1", "tier_2", "tier_3")
    assert bad.json()["data"]["success"] is False and bad.json()["data"]["status_code"] == 500
    assert unknown.status_code == 400
    assert [(d["test"], d["status"], d["attempt_count"]) for d in log] == [(True, "delivered", 1)]


def test_deliveries_show_every_attempt_and_a_failed_one_can_be_redelivered(api, rx):
    rx.behave("/redeliver", status=500)
    webhook = register(api, rx.url("/redeliver"), ["kol.created"])
    with api.client() as client:
        kol = client.post("/kols", json=KOL_BODY).json()["data"]
        wait_until(
            lambda: client.get(f"/webhooks/{webhook['id']}/deliveries", params={"status": "failed"}).json()["data"],
            timeout=15,
        )
        [failed] = client.get(f"/webhooks/{webhook['id']}/deliveries", params={"status": "failed"}).json()["data"]
        assert [a["status_code"] for a in failed["attempts"]] == [500] * 6
        assert client.get("/webhooks").json()["data"][-1]["status"] == "failed"

        rx.behave("/redeliver", status=200)
        again = client.post(f"/webhooks/{webhook['id']}/deliveries/{failed['id']}/redeliver")
        assert again.status_code == 200 and again.json()["data"]["status"] == "pending"
        wait_until(
            lambda: client.get(f"/webhooks/{webhook['id']}/deliveries/{failed['id']}").json()["data"]["status"]
            == "delivered"
        )
        delivered = client.get(f"/webhooks/{webhook['id']}/deliveries/{failed['id']}").json()["data"]
        active = [w for w in client.get("/webhooks").json()["data"] if w["id"] == webhook["id"]][0]
    assert [a["status_code"] for a in delivered["attempts"]] == [500] * 6 + [200]
    assert active["status"] == "active" and active["failed_at"] is None
    assert rx.at("/redeliver")[-1].json()["data"]["id"] == kol["id"]


def test_redeliver_since_requeues_failed_deliveries_and_needs_a_timestamp(api, rx):
    webhook = register(api, rx.url("/since"), ["kol.created"])
    with api.client() as client:
        missing = client.post(f"/webhooks/{webhook['id']}/redeliver", json={})
        naive = client.post(f"/webhooks/{webhook['id']}/redeliver", json={"since": "2026-01-01T00:00:00"})
        ok = client.post(f"/webhooks/{webhook['id']}/redeliver", json={"since": "2026-01-01T00:00:00Z"})
        before_year_one = client.post(f"/webhooks/{webhook['id']}/redeliver", json={"since": "0001-01-01T00:00:00+01:00"})
    assert before_year_one.status_code == 400 and before_year_one.json()["error"]["details"]["reason"] == "out_of_range"
    assert missing.status_code == 400 and missing.json()["error"]["details"]["field"] == "since"
    assert naive.status_code == 400 and naive.json()["error"]["details"]["reason"] == "timezone_required"
    assert ok.status_code == 200 and ok.json()["data"]["requeued"] == 0


def test_disabling_stops_deliveries_and_delete_removes_the_webhook(api, rx):
    webhook = register(api, rx.url("/toggle"), ["campaign.created", "kol.created"])
    with api.client() as client:
        disabled = client.patch(f"/webhooks/{webhook['id']}", json={"enabled": False})
        client.post("/kols", json={**KOL_BODY, "full_name": "Dr. Disabled Period"})
        enabled = client.patch(f"/webhooks/{webhook['id']}", json={"enabled": True})
        kol = client.post("/kols", json={**KOL_BODY, "full_name": "Dr. Enabled Again"}).json()["data"]
        [got] = rx.wait_for("/toggle", 1)
        deleted = client.delete(f"/webhooks/{webhook['id']}")
        after = client.patch(f"/webhooks/{webhook['id']}", json={"enabled": True})
    assert disabled.json()["data"]["enabled"] is False and enabled.json()["data"]["enabled"] is True
    assert got.json()["data"]["id"] == kol["id"]
    assert deleted.status_code == 200 and deleted.json()["data"] == {"id": webhook["id"], "deleted": True}
    assert after.status_code == 404


def test_production_mode_refuses_loopback_urls_at_registration(tmp_path, rx):
    with webhook_service(tmp_path / "service.db", production=True) as service:
        with service.client() as client:
            for url in (rx.url("/x"), "http://localhost:9/x", "http://[::1]/x", "http://169.254.169.254/latest"):
                response = client.post("/webhooks", json={"url": url, "events": ["kol.created"]})
                assert response.status_code == 400, url
                assert response.json()["error"]["details"]["reason"] == "private_address"


def test_a_restarted_service_resumes_pending_retries(tmp_path, rx):
    db = tmp_path / "service.db"
    rx.behave("/restart", status=503)
    slow_retries = {"webhook_time_scale": 0.0005}  # retries after 30 ms, 150 ms, 0.9 s, 3.6 s
    with webhook_service(db, **slow_retries) as first:
        webhook = register(first, rx.url("/restart"), ["kol.created"])
        with first.client() as client:
            kol = client.post("/kols", json=KOL_BODY).json()["data"]
        rx.wait_for("/restart", 2)
    rx.behave("/restart", status=200)
    with webhook_service(db, **slow_retries) as second:
        with second.client(first.key) as client:
            wait_until(
                lambda: client.get(f"/webhooks/{webhook['id']}/deliveries").json()["data"][0]["status"] == "delivered",
                timeout=10,
            )
            [delivery] = client.get(f"/webhooks/{webhook['id']}/deliveries").json()["data"]
    codes = [a["status_code"] for a in delivery["attempts"]]
    assert codes[-1] == 200 and set(codes[:-1]) == {503} and len(codes) >= 3
    assert len(rx.at("/restart")) == len(codes)
    assert rx.at("/restart")[-1].json()["data"]["id"] == kol["id"]
