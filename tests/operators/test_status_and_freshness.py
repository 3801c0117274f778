"""`commops status`: one screen per organization, exit 1 when red, `--json` for machines; a table past its
freshness deadline (judged per organization) alerts once, and recovers when loaded again."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import dagster as dg
from click.testing import CliRunner

from alerts.alerter import opened_alerter
from alerts.status import TABLES
from alerts.watch import review_freshness
from commops_cli.commops import main
from resources.orgs import OrgRegistry
from resources.settings import load_settings
from tests.operators.listeners import alert_channels
from tests.spec_server import SpecServer
from resources.inbox import inbox_location


def _commops(env: dict[str, str], *args: str):
    clean = {k: None for k in os.environ if k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    return CliRunner().invoke(main, list(args), env=clean | env, prog_name="commops")


def test_status_is_red_after_a_failed_night_green_after_a_landed_one_and_a_missed_deadline_alerts_once(
        tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    with SpecServer(kols=3, campaigns=1, products=1, signals=1) as server, alert_channels() as (http, _, env):
        env = {**env, "COMMOPS_BASE_URL": server.base_url, "COMMOPS_DATA_DIR": data}
        _commops({**env, "COMMOPS_API_KEY": "ck_wrong"}, "sync", "--enrich-limit", "0")
        red = _commops(env, "status", "--json")
        screen = _commops(env, "status")
        _commops({**env, "COMMOPS_API_KEY": server.api_key}, "sync", "--enrich-limit", "1")
        green = _commops(env, "status", "--json")

        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = load_settings()
        orgs = OrgRegistry(settings.data_dir).all()
        later = datetime.now(UTC) + timedelta(days=2)  # two nightly runs missed since
        alerts_before = len(http.received)
        with dg.DagsterInstance.from_config(str(settings.dagster_home)) as instance, \
                opened_alerter(inbox_location(settings.data_dir)) as alerter:
            review_freshness(instance, orgs, TABLES, "UTC", alerter, now=later)
            review_freshness(instance, orgs, TABLES, "UTC", alerter, now=later)  # the same incidents
            alerter.deliver()
            stale = [r.json()["text"] for r in http.received[alerts_before:] if r.path.startswith("/slack")]
            review_freshness(instance, orgs, TABLES, "UTC", alerter)  # now: fresh again
            alerter.deliver()
            recovered = [r.json()["text"] for r in http.received[alerts_before:] if r.path.startswith("/slack")][len(stale):]

    assert red.exit_code == 1, red.output
    [default] = json.loads(red.stdout)
    nightly = next(job for job in default["jobs"] if job["job"] == "nightly_sync")
    assert default["red"] and nightly["status"] == "FAILURE" and nightly["failure"].startswith("API key rejected (401)")
    assert "run/nightly_sync/default" in default["open_incidents"]
    assert screen.exit_code == 1 and "default  RED" in screen.stdout and "API key rejected (401)" in screen.stdout

    assert green.exit_code == 0, green.output
    [default] = json.loads(green.stdout)
    nightly = next(job for job in default["jobs"] if job["job"] == "nightly_sync")
    assert not default["red"] and nightly["status"] == "SUCCESS" and nightly["rows"] >= 6
    assert {t["table"] for t in default["tables"]} == set(TABLES)
    assert all(t["as_of"] and not t["stale"] for t in default["tables"]), default["tables"]
    assert default["failing_checks"] == [] and default["quarantined"] == 0 and default["open_incidents"] == []

    assert len(stale) == len(TABLES)
    assert all(text.startswith("commops ALERT · org default · table ") and ", due by " in text for text in stale)
    assert len(recovered) == len(TABLES) and all(t.startswith("commops RECOVERED · org default · table ") for t in recovered)
