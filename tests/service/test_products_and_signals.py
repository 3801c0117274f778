"""Product and signal lists: shapes, filters, meta."""

from __future__ import annotations

import pytest

from tests.service.conftest import data_of, error_of


def ids(response) -> set[str]:
    return {item["id"] for item in data_of(response)}


def test_product_shape(api, dataset):
    stent = next(p for p in data_of(api.get("/products")) if p["id"] == dataset.product["stent"])
    assert set(stent) == {"id", "name", "description", "product_line", "status", "regulatory_status",
                          "target_markets", "key_features", "specifications", "market_status", "created_at",
                          "updated_at"}
    assert stent["product_line"] == {"id": dataset.product_line, "name": "Coronary"}
    assert stent["market_status"]["US"] == {"status": "approved", "clearance_number": "P210001"}
    assert stent["market_status"]["EU"] == {"status": "approved", "ce_mark": True}
    assert stent["specifications"] == [{"name": "diameter", "value": "2.5-4.0 mm"}]


def test_product_meta_is_page_per_page_total(api):
    assert api.get("/products").json()["meta"] == {"page": 1, "per_page": 20, "total": 3}


@pytest.mark.parametrize(
    ("params", "labels"),
    [
        ({"status": "active"}, {"stent"}),
        ({"status": "in_development,discontinued"}, {"valve", "old"}),
        ({"target_market": "EU"}, {"stent"}),
        ({"target_market": "JP,IN"}, {"valve", "old"}),
        ({"search": "transcatheter"}, {"valve"}),
        ({"search": "pump"}, {"old"}),
    ],
)
def test_product_filters(api, dataset, params, labels):
    assert ids(api.get("/products", params=params)) == {dataset.product[label] for label in labels}


def test_product_line_filter(api, dataset):
    assert ids(api.get("/products", params={"product_line": dataset.product_line})) == {
        dataset.product["stent"], dataset.product["old"]}


def test_product_target_market_outside_the_enum_is_400(api):
    assert error_of(api.get("/products", params={"target_market": "FR"}), 400, "invalid_request")["field"] == \
        "target_market"


def test_signal_shape(api, dataset):
    signal = next(s for s in data_of(api.get("/signals")) if s["id"] == dataset.signal["fda_high"])
    assert set(signal) == {"id", "title", "url", "source", "content", "ai_summary", "impact", "sentiment",
                           "product_relevance", "is_read", "is_bookmarked", "published_at", "fetched_at",
                           "updated_at"}
    assert signal["source"] == {"name": "FDA", "country": "US", "region": "North America"}
    assert signal["impact"] == {"level": "high", "score": 82.0, "categories": ["recall"]}
    assert signal["product_relevance"][0]["product_id"] == dataset.product["stent"]
    assert signal["is_bookmarked"] is True and signal["is_read"] is False


def test_signals_are_newest_first_with_unread_count(api, dataset):
    body = api.get("/signals").json()
    assert [s["id"] for s in body["data"]] == [dataset.signal["industry"], dataset.signal["fda_high"],
                                               dataset.signal["ema_low"]]
    assert body["meta"] == {"page": 1, "per_page": 20, "total": 3, "unread_count": 2}


def test_unread_count_counts_the_filtered_set(api):
    assert api.get("/signals", params={"source": "ema"}).json()["meta"]["unread_count"] == 0
    assert api.get("/signals", params={"source": "fda,industry"}).json()["meta"]["unread_count"] == 2


@pytest.mark.parametrize(
    ("params", "labels"),
    [
        ({"source": "fda"}, {"fda_high"}),
        ({"source": "ema,industry"}, {"ema_low", "industry"}),
        ({"impact": "high,critical"}, {"fda_high", "industry"}),
        ({"sentiment": "negative"}, {"fda_high"}),
        ({"is_bookmarked": "true"}, {"fda_high"}),
        ({"is_read": "true"}, {"ema_low"}),
        ({"is_read": "false"}, {"fda_high", "industry"}),
        ({"search": "recall"}, {"fda_high"}),
        ({"search": "transcatheter"}, {"industry"}),  # matches content
        ({"published_after": "2026-02-15T00:00:00Z"}, {"fda_high", "industry"}),
        ({"published_after": "2026-03-01T11:00:00+01:00"}, {"industry"}),  # = 10:00Z, strictly after
    ],
)
def test_signal_filters(api, dataset, params, labels):
    assert ids(api.get("/signals", params=params)) == {dataset.signal[label] for label in labels}


def test_signal_product_filter(api, dataset):
    assert ids(api.get("/signals", params={"product_id": dataset.product["valve"]})) == {dataset.signal["industry"]}


@pytest.mark.parametrize(
    ("params", "field"),
    [({"source": "cnn"}, "source"), ({"impact": "huge"}, "impact"), ({"is_read": "maybe"}, "is_read"),
     ({"published_after": "yesterday"}, "published_after"), ({"published_after": "2026-01-01T00:00:00"},
                                                              "published_after"),
     ({"published_after": "0001-01-01T00:00:00+01:00"}, "published_after"),  # before year 1 in UTC
     ({"sort": "title"}, "sort")],
)
def test_signal_invalid_parameters_are_400(api, params, field):
    assert error_of(api.get("/signals", params=params), 400, "invalid_request")["field"] == field


def test_signal_sort_by_impact_score(api, dataset):
    body = data_of(api.get("/signals", params={"sort": "impact_score", "order": "asc"}))
    assert [s["impact"]["score"] for s in body] == [12.0, 82.0, 95.0]
