"""Campaign creation rules (4.4) and the campaign list with delivery metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.service.conftest import data_of, error_of

CAMPAIGN_FIELDS = {"id", "name", "description", "type", "status", "audience_count", "email", "schedule", "products",
                   "metrics", "created_at", "updated_at", "sent_at"}


def body(**overrides):
    base = {
        "name": "Test campaign", "type": "product_update",
        "audience": {"external_contacts": ["someone@partner.example"]},
        "email": {"subject": "Hi {{first_name}}", "body_html": "<p>{{full_name}} at {{institution}}</p>",
                  "from_name": "Acme", "body_text": "{{title}} {{specialty}}"},
    }
    base.update(overrides)
    return base


def in_future(hours: int = 24) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def test_create_returns_a_draft_with_the_documented_fields(api):
    campaign = data_of(api.post("/campaigns", json=body(description="d")), 201)
    assert set(campaign) == CAMPAIGN_FIELDS and campaign["id"].startswith("cmp_")
    assert campaign["status"] == "draft" and campaign["audience_count"] == 1
    assert campaign["email"] == {"subject": "Hi {{first_name}}", "from_name": "Acme"}
    assert campaign["schedule"] == {"type": "immediate", "send_at": None}
    assert campaign["sent_at"] is None and campaign["metrics"]["sent"] == 0


def test_audience_count_is_distinct_recipients_by_lower_cased_email(api, dataset):
    audience = {
        "kol_ids": [dataset.kol["ana"], dataset.kol["ben"], dataset.kol["ana"]],
        "filters": {"tags": ["speaker"]},  # ana and ben again
        "external_contacts": ["ANA.LOPEZ@example.com", "new@partner.example", "New@Partner.example"],
    }
    assert data_of(api.post("/campaigns", json=body(audience=audience)), 201)["audience_count"] == 3


def test_filters_select_active_kols_with_an_email(api, dataset):
    # tier_2 holds ben (email) and dora (no email); the archived tier_1 KOL is excluded
    campaign = data_of(api.post("/campaigns", json=body(audience={"filters": {"tier": ["tier_2"],
                                                                              "specialty": ["radiology",
                                                                                            "cardiology"]}})), 201)
    assert campaign["audience_count"] == 1


def test_unknown_kol_ids_are_400_listing_them(api, dataset):
    response = api.post("/campaigns", json=body(audience={"kol_ids": [dataset.kol["ana"], "kol_nope",
                                                                      dataset.other_kol]}))
    details = error_of(response, 400, "invalid_request")
    assert details["field"] == "audience.kol_ids" and details["reason"] == "unknown_ids"
    assert details["ids"] == ["kol_nope", dataset.other_kol]


def test_an_empty_audience_is_400(api):
    details = error_of(api.post("/campaigns", json=body(audience={"filters": {"tags": ["nobody_has_this"]}})),
                       400, "invalid_request")
    assert details == {"field": "audience", "reason": "empty"}


def test_invalid_external_contact_is_400_with_its_path(api):
    details = error_of(api.post("/campaigns", json=body(audience={"external_contacts": ["ok@x.example", "nope"]})),
                       400, "invalid_request")
    assert details["field"] == "audience.external_contacts.1" and details["reason"] == "invalid_format"


@pytest.mark.parametrize("part", ["subject", "body_html", "body_text"])
def test_unknown_personalization_variable_is_400_naming_it(api, part):
    email = {"subject": "Hello", "body_html": "<p>x</p>", part: "Dear {{ nickname }}"}
    details = error_of(api.post("/campaigns", json=body(email=email)), 400, "invalid_request")
    assert details == {"field": f"email.{part}", "reason": "unknown_variable", "variable": "nickname"}


def test_missing_email_subject_is_400_missing(api):
    details = error_of(api.post("/campaigns", json=body(email={"body_html": "x"})), 400, "invalid_request")
    assert details == {"field": "email.subject", "reason": "missing"}


def test_unknown_product_ids_are_400(api, dataset):
    details = error_of(api.post("/campaigns", json=body(products=[dataset.product["stent"], "prod_nope"])),
                       400, "invalid_request")
    assert details["field"] == "products" and details["ids"] == ["prod_nope"]


def test_known_products_are_linked(api, dataset):
    campaign = data_of(api.post("/campaigns", json=body(products=[dataset.product["stent"]])), 201)
    assert campaign["products"] == [dataset.product["stent"]]


@pytest.mark.parametrize(
    ("schedule", "field", "reason"),
    [
        ({"type": "scheduled"}, "schedule.send_at", "missing"),
        ({"type": "scheduled", "send_at": "2020-01-01T00:00:00Z"}, "schedule.send_at", "not_in_future"),
        ({"type": "scheduled", "send_at": "2030-01-01T00:00:00"}, "schedule.send_at", "timezone_required"),
        ({"type": "immediate", "send_at": "2099-01-01T00:00:00Z"}, "schedule.send_at", "not_allowed"),
        ({"type": "recurring"}, "schedule.frequency", "missing"),
        ({"type": "weekly"}, "schedule.type", "invalid_choice"),
    ],
)
def test_schedule_rules(api, schedule, field, reason):
    details = error_of(api.post("/campaigns", json=body(schedule=schedule)), 400, "invalid_request")
    assert details["field"] == field and details["reason"] == reason


def test_scheduled_and_recurring_campaigns_are_accepted(api):
    send_at = in_future()
    scheduled = data_of(api.post("/campaigns", json=body(schedule={"type": "scheduled", "send_at": send_at})), 201)
    assert scheduled["schedule"]["type"] == "scheduled" and scheduled["schedule"]["send_at"].endswith("Z")
    recurring = data_of(api.post("/campaigns", json=body(schedule={"type": "recurring", "frequency": "weekly"})), 201)
    assert recurring["schedule"] == {"type": "recurring", "send_at": None, "frequency": "weekly"}


def test_missing_required_top_level_fields_are_400(api):
    for field in ("name", "type", "audience", "email"):
        payload = body()
        del payload[field]
        details = error_of(api.post("/campaigns", json=payload), 400, "invalid_request")
        assert details == {"field": field, "reason": "missing"}


def test_list_metrics_come_from_delivery_records(api, dataset):
    items = data_of(api.get("/campaigns", params={"per_page": 100}))
    sent = next(c for c in items if c["id"] == dataset.campaign["sent"])
    assert set(sent) == CAMPAIGN_FIELDS
    assert sent["metrics"] == {"sent": 3, "delivered": 3, "opened": 2, "clicked": 1,
                               "open_rate": round(2 / 3, 4), "click_rate": round(1 / 3, 4)}
    assert sent["status"] == "active" and sent["sent_at"] is not None and sent["audience_count"] == 3


def test_list_meta_has_no_total_pages(api):
    meta = api.get("/campaigns").json()["meta"]
    assert set(meta) == {"page", "per_page", "total"}


def test_list_filters_by_status_type_and_name(api, dataset):
    assert {c["id"] for c in data_of(api.get("/campaigns", params={"status": "active,paused"}))} == {
        dataset.campaign["sent"], dataset.campaign["paused"]}
    assert [c["id"] for c in data_of(api.get("/campaigns", params={"type": "event_invitation"}))] == [
        dataset.campaign["paused"]]
    assert [c["id"] for c in data_of(api.get("/campaigns", params={"search": "STENT"}))] == [dataset.campaign["sent"]]


def test_list_rejects_unknown_status(api):
    assert error_of(api.get("/campaigns", params={"status": "sent"}), 400, "invalid_request")["field"] == "status"
