"""KOL endpoints: shapes field by field, filters, paging, sorting, include, create rules."""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import bearer, data_of, error_of

FLAT_FIELDS = {
    "id", "full_name", "title", "institution", "department", "specialties", "expertise_areas", "tags", "tier",
    "engagement_level", "email", "phone", "location", "event_count", "last_interaction", "is_archived",
    "created_at", "updated_at",
}
DETAIL_FIELDS = {
    "id", "full_name", "title", "institution", "department", "bio", "specialties", "expertise_areas",
    "research_interests", "tags", "tier", "engagement_level", "contact", "social", "metrics", "last_interaction",
    "notes", "is_archived", "created_at", "updated_at",
}


def ids(items) -> set[str]:
    return {item["id"] for item in items}


def list_all(api: httpx.Client, **params) -> list[dict]:
    return data_of(api.get("/kols", params={"per_page": 100, **params}))


# --- create -----------------------------------------------------------------------


def test_create_returns_201_with_the_flat_shape_and_echoes_supplied_fields(api, unique_email):
    body = {
        "full_name": "Dr Maria Rossi", "specialties": ["structural_heart"], "title": "Professor",
        "institution": "Policlinico", "department": "Cardiology", "expertise_areas": ["tavi"],
        "research_interests": ["valves"], "tier": "tier_2", "email": unique_email, "phone": "+39 02 0000",
        "location": {"city": "Milan", "state": "Lombardy", "country": "IT"}, "bio": "Bio", "notes": "Internal",
        "tags": ["created_in_test"], "social": {"linkedin": "https://linkedin.example/maria", "twitter": "@maria"},
    }
    response = api.post("/kols", json=body)
    kol = data_of(response, 201)
    assert FLAT_FIELDS <= set(kol)
    assert kol["id"].startswith("kol_")
    assert kol["location"] == {"city": "Milan", "state": "Lombardy", "country": "IT"}
    assert kol["email"] == unique_email and kol["phone"] == "+39 02 0000"
    assert kol["tier"] == "tier_2" and kol["engagement_level"] == "low"
    assert kol["event_count"] == 0 and kol["last_interaction"] is None and kol["is_archived"] is False
    assert kol["created_at"] == kol["updated_at"] and kol["created_at"].endswith("Z")
    assert kol["bio"] == "Bio" and kol["notes"] == "Internal" and kol["research_interests"] == ["valves"]
    assert kol["social"] == body["social"]
    assert response.headers["content-type"] == "application/json"


def test_create_defaults_tier_3_and_omits_unsupplied_optional_echoes(api):
    kol = data_of(api.post("/kols", json={"full_name": "Dr Min", "specialties": ["oncology"]}), 201)
    assert kol["tier"] == "tier_3"
    assert "bio" not in kol and "social" not in kol and "notes" not in kol
    assert kol["email"] is None and kol["location"] == {"city": None, "state": None, "country": None}


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"specialties": ["cardiology"]}, "full_name", "missing"),
        ({"full_name": "X"}, "specialties", "missing"),
        ({"full_name": "X", "specialties": []}, "specialties", "too_short"),
        ({"full_name": "X", "specialties": ["Cardiology"]}, "specialties.0", "invalid_format"),
        ({"full_name": "X", "specialties": ["cardiology"], "tier": "tier_9"}, "tier", "invalid_choice"),
        ({"full_name": "X", "specialties": ["cardiology"], "email": "not-an-email"}, "email", "invalid_format"),
        ({"full_name": "X", "specialties": ["cardiology"], "location": {"country": "France"}}, "location.country",
         "invalid_format"),
        ({"full_name": "X", "specialties": ["cardiology"], "engagement_level": "high"}, "engagement_level",
         "unknown_field"),
        ({"full_name": 5, "specialties": ["cardiology"]}, "full_name", "wrong_type"),
    ],
)
def test_create_rejects_invalid_bodies_with_the_field_and_reason(api, body, field, reason):
    details = error_of(api.post("/kols", json=body), 400, "invalid_request")
    assert details["field"] == field and details["reason"] == reason


def test_create_with_an_existing_email_in_another_case_is_409(api, dataset):
    details = error_of(api.post("/kols", json={"full_name": "Copy", "specialties": ["cardiology"],
                                               "email": "ANA.LOPEZ@EXAMPLE.COM"}), 409, "duplicate_email")
    assert details["field"] == "email"


def test_the_same_email_is_allowed_in_another_organization(server, dataset):
    response = httpx.post(f"{server.base_url}/kols", headers=bearer(dataset.other_key),
                          json={"full_name": "Ana elsewhere", "specialties": ["cardiology"],
                                "email": "ana.lopez@example.com"})
    assert response.status_code == 201, response.text


def test_creating_beyond_the_plan_kol_limit_is_429_kol_limit_reached(server, dataset):
    # The limited organization (starter) may hold 3 active KOLs in these tests.
    with httpx.Client(base_url=server.base_url, headers=bearer(dataset.limited_key)) as client:
        for i in range(3):
            assert client.post("/kols", json={"full_name": f"K{i}", "specialties": ["oncology"]}).status_code == 201
        response = client.post("/kols", json={"full_name": "One too many", "specialties": ["oncology"]})
        details = error_of(response, 429, "kol_limit_reached")
        assert details["limit"] == 3 and details["plan"] == "starter"
        assert "x-ratelimit-limit" in response.headers


# --- list: shape, filters ---------------------------------------------------------


def test_list_items_have_the_flat_shape_without_detail_fields(api, dataset):
    items = list_all(api, tags="researcher")
    chen = next(item for item in items if item["id"] == dataset.kol["chen"])
    assert set(chen) == FLAT_FIELDS
    assert chen["location"] == {"city": "Beijing", "state": None, "country": "CN"}
    assert chen["specialties"] == ["electrophysiology"] and chen["tier"] == "tier_3"


def test_list_meta_has_total_pages(api):
    response = api.get("/kols", params={"per_page": 2})
    meta = response.json()["meta"]
    assert set(meta) == {"page", "per_page", "total", "total_pages"}
    assert meta["per_page"] == 2 and meta["total_pages"] == -(-meta["total"] // 2)


def test_archived_kols_are_hidden_by_default_and_listed_alone_with_is_archived_true(api, dataset):
    active = list_all(api)
    assert dataset.kol["archived"] not in ids(active)
    archived = list_all(api, is_archived="true")
    assert ids(archived) == {dataset.kol["archived"]}
    assert archived[0]["is_archived"] is True
    assert ids(list_all(api, is_archived="false")) == ids(active)


def test_tier_filter_takes_comma_separated_values(api, dataset):
    items = list_all(api, tier="tier_1,tier_2")
    assert {i["tier"] for i in items} <= {"tier_1", "tier_2"}
    assert {dataset.kol["ana"], dataset.kol["ben"], dataset.kol["dora"]} <= ids(items)
    assert dataset.kol["chen"] not in ids(items)


def test_specialty_filter_matches_any_listed_specialty(api, dataset):
    items = list_all(api, specialty="electrophysiology,radiology")
    assert ids(items) == {dataset.kol["chen"], dataset.kol["dora"]}


def test_tags_filter_matches_any_listed_tag(api, dataset):
    assert ids(list_all(api, tags="researcher")) == {dataset.kol["chen"]}
    assert ids(list_all(api, tags="advisor,researcher")) == {dataset.kol["ana"], dataset.kol["chen"], dataset.kol["eli"]}


def test_engagement_level_filter(api, dataset):
    high = list_all(api, engagement_level="high")
    assert dataset.kol["ana"] in ids(high) and all(i["engagement_level"] == "high" for i in high)
    low = list_all(api, engagement_level="low,medium")
    assert dataset.kol["ana"] not in ids(low) and dataset.kol["chen"] in ids(low)


@pytest.mark.parametrize(("text", "label"), [("ben ex", "ben"), ("PEKING", "chen"), ("eli.sato@", "eli")])
def test_search_matches_name_institution_or_email_case_insensitively(api, dataset, text, label):
    assert dataset.kol[label] in ids(list_all(api, search=text))
    assert len(list_all(api, search=text)) == 1


def test_search_treats_like_wildcards_literally(api):
    assert list_all(api, search="%") == []


def test_filters_combine_with_and(api, dataset):
    assert ids(list_all(api, tier="tier_1", tags="speaker", specialty="cardiology")) == {dataset.kol["ana"]}


def test_derived_fields_come_from_events_interactions_and_campaigns(api, dataset):
    ana = next(i for i in list_all(api, tags="advisor") if i["id"] == dataset.kol["ana"])
    assert ana["event_count"] == 3  # ben's declined invitation does not count for ana nor for ben
    assert ana["engagement_level"] == "high"  # 3*3 + 2*4 + 10*1.0 = 27 >= 20
    assert ana["last_interaction"] is not None and ana["last_interaction"] >= "2026-04-04T12:00:00"


# --- list: paging and sorting -----------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 100, 101])
def test_paging_edges_return_every_item_once_with_correct_meta(server, dataset, size):
    _, key = dataset.sized[size]
    with httpx.Client(base_url=server.base_url, headers=bearer(key)) as client:
        first = client.get("/kols", params={"per_page": 100}).json()
        assert first["meta"] == {"page": 1, "per_page": 100, "total": size, "total_pages": -(-size // 100)}
        assert len(first["data"]) == min(size, 100)
        second = client.get("/kols", params={"per_page": 100, "page": 2}).json()
        assert len(second["data"]) == max(0, size - 100)
        assert second["meta"]["total"] == size
        assert len(ids(first["data"]) | ids(second["data"])) == size
        beyond = client.get("/kols", params={"per_page": 100, "page": 5}).json()
        assert beyond["data"] == [] and beyond["meta"]["page"] == 5 and beyond["meta"]["total"] == size


def test_default_page_size_is_20(server, dataset):
    _, key = dataset.sized[101]
    body = httpx.get(f"{server.base_url}/kols", headers=bearer(key)).json()
    assert body["meta"]["per_page"] == 20 and len(body["data"]) == 20 and body["meta"]["total_pages"] == 6


@pytest.mark.parametrize("sort", ["created_at", "updated_at", "full_name"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_small_pages_walk_the_whole_list_in_order_without_repeats(server, dataset, sort, order):
    _, key = dataset.sized[101]
    seen: list[dict] = []
    with httpx.Client(base_url=server.base_url, headers=bearer(key)) as client:
        for page in range(1, 12):
            seen += client.get("/kols", params={"per_page": 10, "page": page, "sort": sort, "order": order}).json()["data"]
    assert len(seen) == 101 and len(ids(seen)) == 101
    keys = [(item[sort], item["id"]) for item in seen]
    assert keys == sorted(keys, reverse=(order == "desc"))


def test_default_order_is_newest_first(api):
    items = list_all(api)
    created = [(i["created_at"], i["id"]) for i in items]
    assert created == sorted(created, reverse=True)


@pytest.mark.parametrize(
    ("params", "field", "reason"),
    [
        ({"page": "0"}, "page", "out_of_range"),
        ({"page": "-1"}, "page", "not_an_integer"),
        ({"page": "abc"}, "page", "not_an_integer"),
        ({"per_page": "0"}, "per_page", "out_of_range"),
        ({"per_page": "101"}, "per_page", "out_of_range"),
        ({"sort": "email"}, "sort", "invalid_choice"),
        ({"order": "up"}, "order", "invalid_choice"),
        ({"is_archived": "yes"}, "is_archived", "not_a_boolean"),
        ({"is_archived": "1"}, "is_archived", "not_a_boolean"),
        ({"tier": "tier_1,gold"}, "tier", "invalid_choice"),
        ({"engagement_level": "extreme"}, "engagement_level", "invalid_choice"),
    ],
)
def test_invalid_query_parameters_are_400_naming_the_parameter(api, params, field, reason):
    details = error_of(api.get("/kols", params=params), 400, "invalid_request")
    assert details["field"] == field and details["reason"] == reason


def test_unknown_query_parameters_are_ignored(api):
    assert api.get("/kols", params={"colour": "blue"}).status_code == 200


# --- detail -------------------------------------------------------------------------


def test_detail_has_contact_metrics_and_no_flat_contact_fields(api, dataset):
    kol = data_of(api.get(f"/kols/{dataset.kol['ana']}"))
    assert set(kol) == DETAIL_FIELDS
    assert kol["contact"] == {
        "email": "Ana.Lopez@example.com", "phone": "+1 555 0100",
        "address": {"street": None, "city": "Barcelona", "state": None, "postal_code": None, "country": "ES"},
    }
    assert kol["social"] == {"linkedin": "https://linkedin.example/ana", "twitter": "@ana"}
    assert kol["metrics"] == {"total_events": 3, "total_campaigns": 1, "email_open_rate": 1.0,
                              "response_rate": 0.5, "h_index": 3, "publications_count": 4}
    assert "email" not in kol and "location" not in kol and "events" not in kol


def test_include_embeds_the_requested_arrays_only(api, dataset):
    kol = data_of(api.get(f"/kols/{dataset.kol['ana']}", params={"include": "events,campaigns"}))
    assert "interactions" not in kol and "publications" not in kol
    assert [e["date"] for e in kol["events"]] == ["2026-03-10", "2026-02-10", "2026-01-10"]
    assert {"id", "name", "date", "role"} <= set(kol["events"][0]) and kol["events"][0]["role"] == "chair"
    assert kol["campaigns"] == [{"id": dataset.campaign["sent"], "name": "Stent launch",
                                 "sent_at": kol["campaigns"][0]["sent_at"], "status": "active"}]
    assert len(kol["campaigns"][0]["sent_at"]) == 10  # a date


def test_include_interactions_and_publications(api, dataset):
    kol = data_of(api.get(f"/kols/{dataset.kol['ana']}", params={"include": "interactions,publications"}))
    assert len(kol["interactions"]) == 4 and set(kol["interactions"][0]) == {
        "id", "type", "occurred_at", "summary", "responded"}
    assert len(kol["publications"]) == 4 and kol["publications"][0]["year"] == 2023


def test_unknown_include_value_is_400(api, dataset):
    details = error_of(api.get(f"/kols/{dataset.kol['ana']}", params={"include": "friends"}), 400, "invalid_request")
    assert details["field"] == "include"


def test_unknown_kol_id_is_404(api):
    error_of(api.get("/kols/kol_doesnotexist"), 404, "not_found")


def test_archived_kol_is_still_readable_by_id(api, dataset):
    assert data_of(api.get(f"/kols/{dataset.kol['archived']}"))["is_archived"] is True
