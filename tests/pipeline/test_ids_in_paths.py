"""Ids from API data and webhook payloads never steer a request: an id that is not a spec id
(`kol_` followed by letters, digits, _ or -) is never fetched, and every id put in a path is
percent-encoded. Against the spec server, which records every request it receives, and a real receiver."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import httpx

from pipelines.definitions import build_resources, make_definitions
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from pipelines.sensors import run_config
from resources.commops_api import item_path
from resources.settings import load_settings
from tests.pipeline.sync_support import api_key_in_env, query, sync, with_orgs
from tests.receiver.conftest import SECRET, post_signed
from tests.spec_server import SpecServer
from resources.inbox import Inbox
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings

CLIMBING_ID = "kol_x/../../webhooks"  # unencoded in /v1/kols/{id}, this is GET /v1/webhooks


def _paths(server: SpecServer) -> list[str]:
    return [path for path, _ in server.requests]


def _kol_event(event_id: str, kol_id: str, event: str = "kol.updated", field: str = "id") -> dict:
    return {"id": event_id, "event": event, "created_at": "2026-11-22T10:00:00Z", "data": {field: kol_id},
            "organization_id": "org_spec"}


def test_every_id_in_a_path_is_one_percent_encoded_segment() -> None:
    assert item_path("/kols/{id}", id="../webhooks") == "/kols/..%2Fwebhooks"
    assert item_path("/kols/{id}", id="..") == "/kols/%2E%2E"
    assert item_path("/kols/{id}", id=".") == "/kols/%2E"
    assert item_path("/webhooks/{id}/test", id="wh_1?x=1#y %") == "/webhooks/wh_1%3Fx%3D1%23y%20%25/test"
    assert item_path("/kols/{id}", id="kol_0123abcd") == "/kols/kol_0123abcd"


def test_a_signed_event_naming_a_kol_by_a_path_is_quarantined_and_the_path_is_never_requested(tmp_path: Path) -> None:
    with SpecServer(kols=1) as server:
        [good_id] = [kol["id"] for kol in server.truth("kols")]
        events = [
            _kol_event("wh_evt_climbs", "../webhooks"),
            _kol_event("wh_evt_climbs_deeper", CLIMBING_ID),
            _kol_event("wh_evt_opened_by_a_path", "../webhooks", "campaign.email_opened", "kol_id"),
            _kol_event("wh_evt_good", good_id),
        ]
        receiver = ReceiverServer(ReceiverSettings(webhook_secrets=SECRET, data_dir=tmp_path / "data")).start()
        try:
            with httpx.Client(timeout=10) as client:
                for event in events:
                    assert post_signed(client, receiver.url, event).status_code == 200
            settings = load_settings(base_url=server.base_url, data_dir=tmp_path / "data")
            job = make_definitions(settings, build_resources(settings)).resolve_job_def(APPLY_WEBHOOK_EVENTS)
            with dg.DagsterInstance.ephemeral() as instance, api_key_in_env(server.api_key):
                result = job.execute_in_process(run_config=run_config([e["id"] for e in events]),
                                                instance=with_orgs(instance), partition_key="default")
            inbox = Inbox(receiver.settings.inbox_location)
            quarantined = {event.id: event.last_error for event in inbox.quarantined()}
        finally:
            receiver.stop()
        paths = _paths(server)

    assert result.success
    assert sorted(quarantined) == ["wh_evt_climbs", "wh_evt_climbs_deeper", "wh_evt_opened_by_a_path"]
    assert quarantined["wh_evt_climbs"] == ("data.id '../webhooks' is not a KOL id (kol_ followed by letters, digits, "
                                            "_ or -): it is never fetched")
    assert quarantined["wh_evt_opened_by_a_path"].startswith("data.kol_id '../webhooks' is not a KOL id")
    assert paths == [f"/v1/kols/{good_id}"]  # the good event's refetch alone
    analytics = tmp_path / "data" / "analytics.duckdb"
    assert query(analytics, "SELECT id, status FROM webhook_events ORDER BY id") == [
        ("wh_evt_climbs", "quarantined"), ("wh_evt_climbs_deeper", "quarantined"), ("wh_evt_good", "applied"),
        ("wh_evt_opened_by_a_path", "quarantined"),
    ]


def test_a_listed_kol_whose_id_is_not_a_spec_id_is_kept_never_fetched_counted_and_flagged(tmp_path: Path) -> None:
    with SpecServer(kols=3) as server:
        server.create("kols", 1, ids=(CLIMBING_ID,))
        summary = sync(server, tmp_path / "data", enrich_details_limit=100)
        paths = _paths(server)

    details = summary.asset("warehouse/kol_details").metadata
    assert (details["details_fetched"], details["details_skipped_bad_ids"]) == (3, 1)
    assert details["details_skipped_bad_ids_sample"] == [CLIMBING_ID]
    assert not any("webhooks" in path for path in paths), paths
    analytics = summary.analytics_path
    assert query(analytics, f"SELECT count(*) FROM kols WHERE id = '{CLIMBING_ID}'") == [(1,)]
    assert query(analytics, f"SELECT count(*) FROM kol_details WHERE id = '{CLIMBING_ID}'") == [(0,)]
    assert summary.failed_checks == ["warehouse/kols:ids_unique_and_prefixed"]
