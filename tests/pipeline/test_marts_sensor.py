"""marts_refresh_sensor: after incremental runs, the marts that read what changed are rebuilt, at most every
COMMOPS_MARTS_REFRESH_MINUTES (the sensor evaluated with Dagster's test context on a real instance)."""

from __future__ import annotations

import time

import dagster as dg

from assets.analytics import ANALYTICS_KEY
from assets.mart_keys import MART_KEYS
from pipelines.definitions import make_definitions
from pipelines.marts_sensor import build_marts_refresh_sensor
from resources.settings import load_settings

KOL_360, CAMPAIGN_FUNNEL = dg.AssetKey(["marts", "kol_360"]), dg.AssetKey(["marts", "campaign_funnel"])
WEBHOOK_EVENTS = dg.AssetKey(["warehouse", "webhook_events"])


def _materialized(instance: dg.DagsterInstance, *keys: dg.AssetKey) -> None:
    for key in keys:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key))


def _tick(instance, defs, minutes_later: float = 0.0):
    sensor = build_marts_refresh_sensor(15, clock=lambda: time.time() + minutes_later * 60)
    return sensor(dg.build_sensor_context(instance=instance, definitions=defs))


def test_a_webhook_run_rebuilds_the_marts_reading_its_tables_once_the_cadence_allows_and_not_before(tmp_path):
    defs = make_definitions(load_settings(data_dir=tmp_path / "data"))
    with dg.DagsterInstance.ephemeral() as instance:
        assert isinstance(_tick(instance, defs), dg.SkipReason)  # nothing built, nothing changed
        _materialized(instance, *MART_KEYS)  # the nightly's build
        assert "up to date" in _tick(instance, defs).skip_message

        _materialized(instance, WEBHOOK_EVENTS)  # a webhook run: campaign_engagement (and refetched rows)
        waiting = _tick(instance, defs, minutes_later=5)
        assert isinstance(waiting, dg.SkipReason) and "cadence" in waiting.skip_message

        result = _tick(instance, defs, minutes_later=16)
        (request,) = result.run_requests
        selected = set(request.asset_selection)
        assert {KOL_360, CAMPAIGN_FUNNEL, ANALYTICS_KEY} <= selected
        assert dg.AssetKey(["marts", "staging", "stg_campaign_engagement"]) in selected
        assert not {dg.AssetKey(["marts", "kol_history"]), dg.AssetKey(["marts", "campaign_performance"]),
                    dg.AssetKey(["marts", "product_market_matrix"])} & selected  # they read nothing that changed
        assert request.job_name in (None, "refresh_marts")

        _materialized(instance, KOL_360, CAMPAIGN_FUNNEL)  # the refresh ran
        assert "up to date" in _tick(instance, defs, minutes_later=16).skip_message
