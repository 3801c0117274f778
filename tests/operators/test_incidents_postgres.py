"""The incident store on Postgres (COMMOPS_INBOX_URL names the inbox's database): the daemon's sensor and a
`commops sync` reviewing the same failed run at the same moment send one alert per channel, and the next
landed run one recovery notice, whichever of them sees it."""

from __future__ import annotations

import threading
import uuid

import dagster as dg

from alerts.commands import review_after_run
from pipelines.sensors import alerts_run_failure_sensor, alerts_run_success_sensor
from resources.webhooks import InboxResource
from tests.operators.listeners import alert_channels
from tests.operators.nightly import nightly_of_lake_kols, status_sensor_context
from tests.spec_server import SpecServer


def _both_at_once(*reviews) -> None:
    start = threading.Barrier(len(reviews))
    errors: list[BaseException] = []

    def run(review) -> None:
        start.wait()
        try:
            review()
        except BaseException as error:  # noqa: BLE001 (reported by the test below)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(review,)) for review in reviews]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def test_a_sensor_and_a_sync_sharing_the_postgres_store_send_one_alert_and_one_recovery(postgres, tmp_path,
                                                                                      monkeypatch):
    url = postgres.create_database(f"incidents_{uuid.uuid4().hex[:12]}")
    data_dir = tmp_path / "data"
    with SpecServer(kols=3) as server, alert_channels() as (http, mailbox, env), \
            dg.DagsterInstance.ephemeral() as instance:
        for name, value in {**env, "COMMOPS_INBOX_URL": url}.items():
            monkeypatch.setenv(name, value)
        inbox = InboxResource(data_dir=str(data_dir), url=url)
        failed = nightly_of_lake_kols(instance, server.base_url, "ck_revoked", data_dir)
        failure = status_sensor_context("alerts_run_failure_sensor", instance, failed, {"inbox": inbox})
        _both_at_once(lambda: alerts_run_failure_sensor(failure),
                      lambda: review_after_run(instance, failed.run_id, url, []))
        alerts = [request.json() for request in http.on("/hook")]
        database = url.rsplit("/", 1)[1]
        opened = postgres.execute("SELECT key, resolved_at FROM commops_alert_incidents", database=database)

        landed = nightly_of_lake_kols(instance, server.base_url, server.api_key, data_dir)
        success = status_sensor_context("alerts_run_success_sensor", instance, landed, {"inbox": inbox})
        _both_at_once(lambda: alerts_run_success_sensor(success),
                      lambda: review_after_run(instance, landed.run_id, url, []))
        recoveries = [request.json() for request in http.on("/hook")][len(alerts):]
        owed = postgres.execute("SELECT count(*) FROM commops_alert_outbox WHERE delivered_at IS NULL",
                                database=database)

    assert failed.status == dg.DagsterRunStatus.FAILURE and landed.status == dg.DagsterRunStatus.SUCCESS
    [alert] = alerts
    assert (alert["incident"], alert["kind"]) == ("run/nightly_sync/default", "run_failed")
    assert alert["cause"].startswith("API key rejected (401)"), alert["cause"]
    assert len(http.on("/slack/T0/B0/slack-url-secret")) == 2 and len(mailbox.messages) == 2
    assert opened == [("run/nightly_sync/default", None)] and not (tmp_path / "data" / "inbox" / "alerts.db").exists()
    [recovery] = recoveries
    assert (recovery["state"], recovery["incident"]) == ("RECOVERED", "run/nightly_sync/default")
    assert owed == [(0,)]
