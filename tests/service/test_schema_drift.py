"""extra_fields: every item gains unknown fields, for testing client tolerance."""

from __future__ import annotations

import httpx

from service.server import ServiceServer
from service.settings import ServiceSettings
from tests.service.conftest import bearer


def test_extra_fields_adds_unknown_top_level_and_nested_keys(dataset):
    with ServiceServer(ServiceSettings(db=dataset.db, extra_fields=True, rate_limits_enabled=False)) as server, \
            httpx.Client(base_url=server.base_url, headers=bearer(dataset.key)) as client:
        kol = client.get("/kols", params={"tags": "researcher"}).json()["data"][0]
        assert kol["x_added_field"] == "drift" and "x_geo" in kol["location"]
        detail = client.get(f"/kols/{dataset.kol['chen']}").json()["data"]
        assert "x_added_field" in detail and "x_geo" in detail["contact"]["address"]
        for path in ("/campaigns", "/products", "/signals"):
            assert all("x_added_field" in item for item in client.get(path).json()["data"])
