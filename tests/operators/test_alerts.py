"""Alerts without Dagster+: a failed nightly alerts once on every channel (Slack webhook, signed JSON
webhook, email), naming the organization and the cause and never the key; the next success sends a recovery
notice; the inbox's quarantined events and aged backlog alert once across sensor ticks; a channel answering
500 fails nothing and its alert is delivered later. Against a local HTTP listener and an aiosmtpd server."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg
from click.testing import CliRunner

from commops_cli.commops import main
from alerts.alerter import ATTEMPTS_AT_ONCE, opened_alerter
from alerts.commands import review_after_run
from pipelines.sensors import alerts_run_failure_sensor, alerts_sensor
from tests.operators.nightly import nightly_of_lake_kols, status_sensor_context
from resources.orgs_resource import OrgsResource
from resources.webhooks import InboxResource
from tests.operators.listeners import alert_channels
from tests.spec_server import SpecServer
from resources.inbox import inbox_path, open_inbox
from resources.inbox.envelope import parse_envelope
from webhooks.signatures import sign

SLACK, HOOK = "/slack/T0/B0/slack-url-secret", "/hook"


def _sync(data_dir: Path, env: dict[str, str]):
    clean = {k: None for k in os.environ if k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    return CliRunner().invoke(main, ["sync", "--data-dir", str(data_dir), "--enrich-limit", "0", "--no-progress",
                                     "--no-marts"],  # the alerts are the run's, whatever it builds
                              env=clean | env, prog_name="commops")


def test_a_revoked_key_alerts_once_per_channel_and_the_next_success_sends_a_recovery_notice(tmp_path):
    with SpecServer(kols=3, campaigns=1, products=1, signals=1) as server, alert_channels() as (http, mailbox, env):
        revoked = {**env, "COMMOPS_BASE_URL": server.base_url, "COMMOPS_API_KEY": "ck_revoked_key_4711"}
        failed = _sync(tmp_path / "data", revoked)
        failed_again = _sync(tmp_path / "data", revoked)  # the same incident: no second alert
        after_failures = (len(http.on(SLACK)), len(http.on(HOOK)), len(mailbox.messages))
        landed = _sync(tmp_path / "data", {**env, "COMMOPS_BASE_URL": server.base_url, "COMMOPS_API_KEY": server.api_key})

    assert failed.exit_code == 1 and failed_again.exit_code == 1 and landed.exit_code == 0, landed.stderr
    assert after_failures == (1, 1, 1)
    [slack_alert, slack_recovery] = [request.json()["text"] for request in http.on(SLACK)]
    assert slack_alert.startswith("commops ALERT · org default · job nightly_sync · API key rejected (401) by ")
    assert "check COMMOPS_API_KEY" in slack_alert and " · http://dagster.example:3000/runs/" in slack_alert
    assert slack_recovery.startswith("commops RECOVERED · org default · job nightly_sync · run ")

    [hook_alert, hook_recovery] = http.on(HOOK)
    for request in (hook_alert, hook_recovery):  # signed as the service signs its webhooks
        assert request.headers["x-service-signature"] == sign("alert-signing-secret", request.body)
        assert request.headers["webhook-id"].startswith("commops-alert-")
    alert = hook_alert.json()
    assert (alert["state"], alert["org"], alert["kind"], alert["subject"]) == ("ALERT", "default", "run_failed",
                                                                              "job nightly_sync")
    assert alert["cause"].startswith("API key rejected (401)") and alert["run_url"].endswith(alert["run_id"])
    assert hook_recovery.json()["state"] == "RECOVERED"

    [mail_alert, mail_recovery] = mailbox.messages
    assert mail_alert["Subject"] == slack_alert[:250] and mail_alert["To"] == "oncall@example.org"
    assert "cause: API key rejected (401)" in mail_alert.get_content()
    assert mail_recovery["Subject"].startswith("commops RECOVERED · org default")

    everything = " ".join([*(r.body.decode() for r in http.received), *(m.as_string() for m in mailbox.messages)])
    assert "ck_revoked_key_4711" not in everything and server.api_key not in everything
    assert "alert-signing-secret" not in everything and "slack-url-secret" not in everything


def _event(event_id: str, kol_id: str) -> tuple[bytes, object]:
    raw = json.dumps({"id": event_id, "event": "kol.updated", "created_at": "2026-11-28T01:00:00Z",
                      "data": {"id": kol_id}}).encode()
    return raw, parse_envelope(raw)


def test_quarantined_events_and_an_aged_backlog_alert_once_across_ticks_even_past_a_failing_channel(tmp_path,
                                                                                                   monkeypatch):
    data_dir = tmp_path / "data"
    with alert_channels() as (http, mailbox, env):
        for name, value in {**env, "COMMOPS_ALERT_BACKLOG_MINUTES": "0.01"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("COMMOPS_INBOX_URL", raising=False)
        with open_inbox(data_dir) as inbox:
            inbox.add_many([_event("wh_evt_bad", "kol_1"), _event("wh_evt_waiting", "kol_2")])
            inbox.quarantine(["wh_evt_bad"], "refetch failed")
        time.sleep(1.0)  # the pending event is now older than 0.6 s
        resources = {"inbox": InboxResource(data_dir=str(data_dir)),
                     "orgs": OrgsResource(data_dir=str(data_dir), default_base_url="http://127.0.0.1:9/v1")}

        def tick() -> None:
            with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources=resources) as context:
                alerts_sensor(context)

        http.status = 500  # Slack and the webhook refuse: the ticks go on, the alerts stay owed
        tick()
        tick()
        assert http.refused > 0 and http.received == []
        http.status = 200
        tick()
        tick()
        slack = [request.json()["text"] for request in http.on(SLACK)]
        hooks = [request.json()["kind"] for request in http.on(HOOK)]
        mails = [message["Subject"] for message in mailbox.messages]

        with open_inbox(data_dir) as inbox:  # both fixed: the next tick sends the recovery notices
            inbox.retry(["wh_evt_bad"])
            inbox.mark_applied(["wh_evt_bad", "wh_evt_waiting"])
        tick()
        tick()
        recovered = [request.json()["text"] for request in http.on(SLACK)][len(slack):]

    assert len(slack) == 2 and sorted(hooks) == ["backlog", "quarantined"] and len(mails) == 2
    [backlog] = [text for text in slack if "pending" in text]
    [quarantined] = [text for text in slack if "quarantined" in text]
    assert backlog.startswith("commops ALERT · org default · inbox · 1 webhook event(s) pending, the oldest for ")
    assert quarantined.startswith("commops ALERT · org default · inbox · 1 webhook event(s) quarantined")
    assert len(recovered) == 2 and all(text.startswith("commops RECOVERED · org default · inbox") for text in recovered)
    assert inbox_path(data_dir).with_name("alerts.db").exists()  # the incidents, beside the inbox


def test_a_dead_channel_is_tried_once_per_delivery_and_every_message_it_owes_arrives_once_it_answers(tmp_path,
                                                                                                    monkeypatch):
    with alert_channels() as (http, mailbox, env):
        monkeypatch.setenv("COMMOPS_ALERT_SLACK_WEBHOOK_URL", env["COMMOPS_ALERT_SLACK_WEBHOOK_URL"])
        with opened_alerter(inbox_path(tmp_path / "data")) as alerter:
            for org in ("acme", "beta", "gamma", "delta"):
                alerter.alert(f"run_failed:{org}", "run_failed", org, "job nightly_sync", "API key rejected (401)")
            http.status = 500
            assert alerter.deliver() == (0, 4)
            refused_once = http.refused  # one message's attempts: the other three were not sent to a dead channel
            http.status = 200
            assert alerter.deliver() == (4, 0)
            assert alerter.deliver() == (0, 0)

    assert refused_once == ATTEMPTS_AT_ONCE
    assert sorted(request.json()["text"].split(" · ")[1] for request in http.on(SLACK)) == [
        "org acme", "org beta", "org delta", "org gamma"]


def test_a_failed_blocking_check_is_one_incident_naming_the_check_and_its_pass_recovers_it(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    with SpecServer(kols=3) as server, alert_channels() as (http, mailbox, env), \
            dg.DagsterInstance.ephemeral() as instance:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("COMMOPS_INBOX_URL", raising=False)
        inbox = InboxResource(data_dir=str(data_dir))
        server.create("kols", 1, ids=("not_a_kol_id",))  # fails the snapshot's blocking id check
        blocked = nightly_of_lake_kols(instance, server.base_url, server.api_key, data_dir)
        # the daemon's sensor, then `commops sync` seeing the same run
        alerts_run_failure_sensor(
            status_sensor_context("alerts_run_failure_sensor", instance, blocked, {"inbox": inbox}))
        review_after_run(instance, blocked.run_id, inbox.location, [])
        alerts = [request.json() for request in http.on(HOOK)]

        server.delete("kols", ["not_a_kol_id"])
        landed = nightly_of_lake_kols(instance, server.base_url, server.api_key, data_dir)
        review_after_run(instance, landed.run_id, inbox.location, [])
        recoveries = [request.json() for request in http.on(HOOK)][len(alerts):]

    assert blocked.status == dg.DagsterRunStatus.FAILURE and landed.status == dg.DagsterRunStatus.SUCCESS
    [alert] = alerts  # the run failure the check caused is folded into the check's incident
    assert (alert["kind"], alert["subject"], alert["incident"]) == (
        "check_failed", "check lake/kols:ids_unique_and_prefixed", "check/lake/kols:ids_unique_and_prefixed/default")
    assert alert["cause"] == ("failed (blocking): lake/kols and what depends on it were not loaded; "
                              "job nightly_sync failed")
    assert alert["run_id"] == blocked.run_id and len(http.on(SLACK)) == 2 and len(mailbox.messages) == 2
    [recovery] = recoveries
    assert (recovery["state"], recovery["incident"]) == ("RECOVERED", "check/lake/kols:ids_unique_and_prefixed/default")
