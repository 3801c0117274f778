"""Over real HTTP: in the default seed dataset every filter value of part 4 has matches."""

from __future__ import annotations

import httpx
import pytest

from commops_spec.constants import (
    CAMPAIGN_STATUSES,
    CAMPAIGN_TYPES,
    ENGAGEMENT_LEVELS,
    IMPACT_LEVELS,
    KOL_TIERS,
    MARKETS,
    PRODUCT_STATUSES,
    SENTIMENTS,
    SIGNAL_SOURCES,
)
from service import admin
from service import seed_vocab as V
from service.seed import seed
from service.server import ServiceServer
from service.settings import ServiceSettings


@pytest.fixture(scope="module")
def seeded_api(tmp_path_factory):
    """A running service over the default seed dataset; yields an httpx client bound to it."""
    path = tmp_path_factory.mktemp("seed_http") / "service.db"
    org_id = admin.create_org(path, "Seeded Medical", "enterprise")
    key = admin.create_key(path, org_id, "all")
    seed(path, org_id)
    with ServiceServer(ServiceSettings(db=path, rate_limits_enabled=False)) as server:
        with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
            yield client


def _matches(seeded_api: httpx.Client, path: str, **params) -> list[dict]:
    response = seeded_api.get(path, params={**params, "per_page": 100})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["meta"]["total"] > 0, f"no match for {path} {params}"
    return body["data"]


def _cases():
    for value in KOL_TIERS:
        yield "/kols", "tier", value, lambda item, v: item["tier"] == v
    for value in ENGAGEMENT_LEVELS:
        yield "/kols", "engagement_level", value, lambda item, v: item["engagement_level"] == v
    for value in ("interventional_cardiology", "electrophysiology", "endocrinology", "orthopedic_surgery",
                  "neurosurgery", "structural_heart"):
        yield "/kols", "specialty", value, lambda item, v: v in item["specialties"]
    for value in V.TAGS:
        yield "/kols", "tags", value, lambda item, v: v in item["tags"]
    yield "/kols", "search", "Mayo", lambda item, v: "mayo" in f"{item['full_name']} {item['institution']} " \
                                                             f"{item['email']}".lower()
    for value in ("true", "false"):
        yield "/kols", "is_archived", value, lambda item, v: item.get("is_archived", v == "true") == (v == "true")
    for value in CAMPAIGN_STATUSES:
        yield "/campaigns", "status", value, lambda item, v: item["status"] == v
    for value in CAMPAIGN_TYPES:
        yield "/campaigns", "type", value, lambda item, v: item["type"] == v
    yield "/campaigns", "search", "newsletter", lambda item, v: v in item["name"].lower()
    for value in PRODUCT_STATUSES:
        yield "/products", "status", value, lambda item, v: item["status"] == v
    for value in MARKETS:
        yield "/products", "target_market", value, lambda item, v: v in item["target_markets"]
    for value in SIGNAL_SOURCES:
        yield "/signals", "source", value, None
    for value in IMPACT_LEVELS:
        yield "/signals", "impact", value, lambda item, v: item["impact"]["level"] == v
    for value in SENTIMENTS:
        yield "/signals", "sentiment", value, lambda item, v: item["sentiment"] == v
    for name in ("is_read", "is_bookmarked"):
        for value in ("true", "false"):
            yield "/signals", name, value, lambda item, v, name=name: item[name] == (v == "true")
    yield "/signals", "search", "recall", lambda item, v: v in f"{item['title']} {item['content']}".lower()
    yield "/signals", "published_after", "2026-01-01T00:00:00Z", lambda item, v: item["published_at"] > v


@pytest.mark.parametrize(("path", "name", "value", "check"),
                         [pytest.param(*case, id=f"{case[0][1:]}-{case[1]}={case[2]}") for case in _cases()])
def test_every_filter_value_has_matches_in_the_default_seed(seeded_api, path, name, value, check):
    items = _matches(seeded_api, path, **{name: value})
    if check is not None:
        assert all(check(item, value) for item in items)


def test_product_line_filter_has_matches_for_every_seeded_line(seeded_api):
    lines = {p["product_line"]["id"] for p in _matches(seeded_api, "/products")}
    assert len(lines) == len(V.PRODUCT_LINES)
    for line_id in lines:
        assert all(p["product_line"]["id"] == line_id for p in _matches(seeded_api, "/products", product_line=line_id))


def test_product_search_and_product_relevance_point_at_real_products(seeded_api):
    products = _matches(seeded_api, "/products")
    brand = products[0]["name"].split(" ")[0]
    assert all(brand.lower() in f"{p['name']} {p['description']}".lower()
               for p in _matches(seeded_api, "/products", search=brand))
    related = [r for s in _matches(seeded_api, "/signals") for r in s["product_relevance"]]
    assert related
    product_id = related[0]["product_id"]
    assert product_id in {p["id"] for p in products}
    signals = _matches(seeded_api, "/signals", product_id=product_id)
    assert all(product_id in {r["product_id"] for r in s["product_relevance"]} for s in signals)


def test_seeded_kol_detail_has_events_campaigns_and_metrics(seeded_api):
    engaged = _matches(seeded_api, "/kols", engagement_level="high")[0]
    detail = seeded_api.get(f"/kols/{engaged['id']}", params={"include": "events,campaigns,interactions,publications"})
    assert detail.status_code == 200, detail.text
    data = detail.json()["data"]
    assert data["metrics"]["total_events"] == engaged["event_count"] > 0
    assert len([e for e in data["events"] if e.get("attended", True)]) >= engaged["event_count"]
    assert data["campaigns"] and data["interactions"]
    assert data["metrics"]["publications_count"] == len(data["publications"])
