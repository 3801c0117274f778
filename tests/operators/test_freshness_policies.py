"""Dagster's own FreshnessPolicy on the warehouse tables and `analytics`, of the deadline the alerts judge
(the nightly schedule plus COMMOPS_FRESHNESS_*), and the freshness daemon enabled by both dagster.yaml files
(the local one under `commops ui`, the deployment's on Postgres)."""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path

import dagster as dg
from dagster._daemon.freshness import FreshnessDaemon

from pipelines.definitions import make_definitions
from resources.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
TABLES = ["kols", "campaigns", "products", "signals", "kol_details"]


def _policies(monkeypatch, tmp_path, **environment: str) -> dict[str, dg.FreshnessPolicy | None]:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(base_url="http://127.0.0.1:9/v1", data_dir=tmp_path / "data")
    defs = make_definitions(settings)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    return {key.to_user_string(): graph.get(key).freshness_policy for key in graph.get_all_asset_keys()}


def test_the_warehouse_tables_and_analytics_carry_the_nightly_deadline_as_dagsters_freshness_policy(
        monkeypatch, tmp_path):
    for name in ("COMMOPS_FRESHNESS_HOURS", "COMMOPS_FRESHNESS_KOL_DETAILS_HOURS", "COMMOPS_FRESHNESS_ANALYTICS_HOURS"):
        monkeypatch.delenv(name, raising=False)
    defaults = _policies(monkeypatch, tmp_path, COMMOPS_TIMEZONE="Europe/Berlin")
    tuned = _policies(monkeypatch, tmp_path, COMMOPS_TIMEZONE="UTC", COMMOPS_FRESHNESS_HOURS="3.5",
                      COMMOPS_FRESHNESS_KOL_DETAILS_HOURS="6")

    two_hours = dg.FreshnessPolicy.cron(deadline_cron="0 4 * * *", lower_bound_delta=timedelta(hours=2),
                                        timezone="Europe/Berlin")
    assert {key: defaults[key] for key in [*(f"warehouse/{t}" for t in TABLES), "analytics"]} == {
        key: two_hours for key in [*(f"warehouse/{t}" for t in TABLES), "analytics"]}
    assert defaults["lake/kols"] is None and defaults["warehouse/webhook_events"] is None  # not nightly
    assert tuned["warehouse/kols"] == dg.FreshnessPolicy.cron(
        deadline_cron="30 5 * * *", lower_bound_delta=timedelta(hours=3.5), timezone="UTC")
    assert tuned["warehouse/kol_details"] == dg.FreshnessPolicy.cron(
        deadline_cron="0 8 * * *", lower_bound_delta=timedelta(hours=6), timezone="UTC")


def test_the_local_instance_runs_the_freshness_daemon(tmp_path):
    shutil.copy(ROOT / "commops_cli" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_settings("freshness") == {"enabled": True}  # said, not left to Dagster's default
        assert instance.freshness_enabled
        assert FreshnessDaemon.daemon_type() in instance.get_required_daemon_types()


def test_the_deployments_instance_on_postgres_runs_the_freshness_daemon(postgres, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_POSTGRES_URL", postgres.create_database(f"fresh_{uuid.uuid4().hex[:12]}"))
    shutil.copy(ROOT / "deploy" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_settings("freshness") == {"enabled": True}  # said, not left to Dagster's default
        assert instance.freshness_enabled
        assert FreshnessDaemon.daemon_type() in instance.get_required_daemon_types()
