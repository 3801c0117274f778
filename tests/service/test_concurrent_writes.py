"""Concurrent creates: each request gets its own connection and transaction (no 500s under load)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from service import admin
from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store.db import init_db


def test_concurrent_creates_of_kols_and_campaigns_all_succeed(tmp_path):
    db = tmp_path / "service.db"
    init_db(db)
    org = admin.create_org(db, "Concurrency Medical", "enterprise")
    key = admin.create_key(db, org, "all")
    with ServiceServer(ServiceSettings(db=db, rate_limits_enabled=False)) as server, httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30,
        limits=httpx.Limits(max_connections=16),
    ) as http, ThreadPoolExecutor(16) as pool:

        def create_kol(n: int) -> int:
            body = {"full_name": f"Dr Parallel {n}", "specialties": ["cardiology"], "email": f"p{n}@example.org"}
            return http.post("/kols", json=body).status_code

        def create_campaign(n: int) -> int:
            body = {
                "name": f"Parallel {n}", "type": "newsletter",
                "audience": {"external_contacts": [f"c{n}@example.org"]},
                "email": {"subject": "News for {{full_name}}", "body_html": "<p>Hello</p>"},
            }
            return http.post("/campaigns", json=body).status_code

        kol_codes = list(pool.map(create_kol, range(40)))
        campaign_codes = list(pool.map(create_campaign, range(40)))
        total = http.get("/kols").json()["meta"]["total"]

    assert kol_codes == [201] * 40
    assert campaign_codes == [201] * 40
    assert total == 40
