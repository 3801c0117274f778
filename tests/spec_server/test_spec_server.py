"""The spec server itself: the shapes, auth, paging meta, sort rules, clock and hooks it promises the sync tests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx
import pytest

from tests.spec_server import SpecServer

KOL_LIST_FIELDS = {
    "id", "full_name", "title", "institution", "department", "specialties", "expertise_areas", "tags", "tier",
    "engagement_level", "email", "phone", "location", "event_count", "last_interaction", "created_at", "updated_at",
}


@pytest.fixture
def server() -> Iterator[SpecServer]:
    with SpecServer(kols=45, archived_kols=12, campaigns=30, products=8, signals=25) as running:
        yield running


def _get(server: SpecServer, path: str, **params) -> httpx.Response:
    return httpx.get(server.base_url + path, params=params, headers={"Authorization": f"Bearer {server.api_key}"}, timeout=10)


def test_list_items_have_exactly_the_spec_fields(server):
    kols = _get(server, "/kols", per_page=100).json()["data"]
    assert kols and all(set(k) == KOL_LIST_FIELDS for k in kols)
    assert all(set(k["location"]) == {"city", "country"} for k in kols)
    campaign = _get(server, "/campaigns").json()["data"][0]
    assert "updated_at" not in campaign and {"id", "name", "type", "status", "metrics", "created_at", "sent_at"} <= set(campaign)
    product = _get(server, "/products").json()["data"][0]
    assert "updated_at" not in product and {"id", "product_line", "market_status", "created_at"} <= set(product)
    signal = _get(server, "/signals").json()["data"][0]
    assert not {"updated_at", "created_at"} & set(signal) and {"published_at", "fetched_at", "impact"} <= set(signal)
    assert all(item["created_at"].endswith("Z") and len(item["created_at"]) == 20 for item in kols)  # to the second


def test_detail_has_contact_and_metrics_and_no_flat_contact_fields(server):
    kol_id = server.truth("kols")[0]["id"]
    detail = _get(server, f"/kols/{kol_id}").json()["data"]
    assert {"email", "phone", "address"} == set(detail["contact"])
    assert "h_index" in detail["metrics"]
    assert not {"email", "phone", "location"} & set(detail)
    assert _get(server, "/kols/kol_missing").status_code == 404


def test_missing_or_wrong_key_is_401_with_the_error_envelope(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.get(server.base_url + "/kols", headers=headers, timeout=10)
        assert response.status_code == 401
        assert set(response.json()["error"]) == {"code", "message", "details"}


def test_paging_meta_and_parameter_errors(server):
    meta = _get(server, "/kols", per_page=20, page=3).json()["meta"]
    assert meta == {"page": 3, "per_page": 20, "total": 45, "total_pages": 3}
    assert _get(server, "/kols", is_archived="true").json()["meta"]["total"] == 12
    assert _get(server, "/campaigns").json()["meta"] == {"page": 1, "per_page": 20, "total": 30}
    assert set(_get(server, "/signals").json()["meta"]) == {"page", "per_page", "total", "unread_count"}
    for params, field in (({"per_page": 101}, "per_page"), ({"per_page": 0}, "per_page"), ({"page": 0}, "page"),
                          ({"sort": "updated_at"}, "sort"), ({"order": "up"}, "order")):
        response = _get(server, "/kols", **params)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_request"
        assert response.json()["error"]["details"]["field"] == field
    assert _get(server, "/signals", sort="created_at").status_code == 400
    assert _get(server, "/signals", sort="fetched_at").status_code == 200


def test_sort_is_by_the_field_then_id_in_the_requested_order(server):
    asc = _get(server, "/kols", per_page=100, sort="created_at", order="asc").json()["data"]
    assert [(k["created_at"], k["id"]) for k in asc] == sorted((k["created_at"], k["id"]) for k in asc)
    default = _get(server, "/kols", per_page=100).json()["data"]
    assert [k["id"] for k in default] == [k["id"] for k in reversed(asc)]
    assert len({k["created_at"] for k in asc}) < len(asc)  # the seed has ties, so the id tie-break matters


def test_date_header_and_new_stamps_follow_the_clock_offset(server):
    for offset in (600, -600):
        server.clock_offset = offset
        response = _get(server, "/kols")
        server_now = parsedate_to_datetime(response.headers["date"])
        assert abs((server_now - datetime.now(UTC)) - timedelta(seconds=offset)) < timedelta(seconds=5)
        (new_id,) = server.create_kols(1)
        created = {k["id"]: k for k in server.truth("kols")}[new_id]["created_at"]
        assert abs(datetime.fromisoformat(created) - server_now) < timedelta(seconds=5)
    assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(response.headers)


def test_a_page_hook_runs_once_between_pages_and_requests_are_counted(server):
    archived_before = server.archived_kol_ids()
    victim = _get(server, "/kols", per_page=10, page=1, sort="created_at", order="asc").json()["data"][0]["id"]
    server.on_page("/kols", 2, lambda: server.archive_kols([victim]), params={"is_archived": "false"})
    _get(server, "/kols", per_page=10, page=2, is_archived="true")  # archived walk: no match
    assert server.archived_kol_ids() == archived_before
    page_2 = _get(server, "/kols", per_page=10, page=2)
    assert page_2.json()["meta"]["total"] == 45  # computed before the hook ran
    assert server.archived_kol_ids() == archived_before | {victim}
    assert _get(server, "/kols", per_page=10, page=2).json()["meta"]["total"] == 44  # one-shot, state changed
    assert server.request_count("/kols") == 4
    assert server.requests[-1] == ("/v1/kols", {"per_page": "10", "page": "2"})


def test_stop_really_stops():
    running = SpecServer(kols=1).start()
    url = running.base_url
    running.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/kols", timeout=2)
