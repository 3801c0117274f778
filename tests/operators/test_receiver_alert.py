"""The "receiver looks dead" alert, with a real service delivering webhooks to a real receiver and inbox: the
receiver stops, a KOL changes in the service, and once no event has come for longer than the setting while
the API shows the change, `alerts_sensor` alerts once across ticks; when the receiver is back and the
next event arrives, a recovery notice follows."""

from __future__ import annotations

import time

import dagster as dg

from pipelines.sensors import alerts_sensor
from resources.orgs_resource import OrgsResource
from resources.webhooks import InboxResource
from tests.operators.listeners import alert_channels
from tests.pipeline.conftest import make_service  # noqa: F401 (the stack's fixture)
from tests.pipeline.sync_support import api_key_in_env
from tests.pipeline.webhook_stack import Stack, new_kol, stack  # noqa: F401 (a fixture)
from webhooks.receiver.server import ReceiverServer
from webhooks.subscriptions import Subscriptions

SILENCE_MINUTES = 0.03  # 1.8 s: the delivery grace is the same here (2 minutes, at most the setting)
PAST_IT = 3.5  # seconds (past the setting, the grace and the Date header's whole seconds)


def _tick(stack: Stack) -> None:
    resources = {"inbox": InboxResource(data_dir=str(stack.data_dir)),
                 "orgs": OrgsResource(data_dir=str(stack.data_dir), default_base_url=stack.service.base_url)}
    with dg.build_sensor_context(instance=stack.instance, resources=resources) as context:
        alerts_sensor(context)


def _tick_until_alerted(stack: Stack, http, seconds: float = 10.0) -> None:
    """The API's clock is read from its Date header: whole seconds, which uvicorn refreshes about once a
    second (later on a busy host), so the API may see a row as due a little after our clock does."""
    deadline = time.monotonic() + seconds
    _tick(stack)
    while not http.on("/hook") and time.monotonic() < deadline:
        time.sleep(0.25)
        _tick(stack)


def test_a_dead_receiver_alerts_once_while_the_api_shows_changes_and_recovers_when_events_arrive(
        stack: Stack, monkeypatch):  # noqa: F811 (the fixture)
    with alert_channels() as (http, mailbox, env), api_key_in_env(stack.service.api_key):
        for name, value in {**env, "COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES": str(SILENCE_MINUTES)}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("COMMOPS_INBOX_URL", raising=False)
        stack.change(lambda conn, org: new_kol(conn, org, "Ada First"))
        stack.wait_for_events(1)
        _tick(stack)
        time.sleep(PAST_IT)
        _tick(stack)  # silent for longer than the setting, but nothing changed since: no alert
        quiet = list(http.received)

        port = stack.receiver.port
        stack.receiver.stop()  # the receiver dies; the service keeps changing
        stack.change(lambda conn, org: new_kol(conn, org, "Ben Missed"))
        time.sleep(PAST_IT)
        _tick_until_alerted(stack, http)
        _tick(stack)  # the same incident: no second alert
        alerts = [request.json() for request in http.on("/hook")]

        revived = ReceiverServer(stack.receiver.settings, port=port).start()
        try:
            with Subscriptions(stack.service.base_url, stack.service.api_key) as subscriptions:
                for webhook in subscriptions.list():  # the webhook the service gave up on, enabled again
                    subscriptions.update(webhook["id"], enabled=True)
            stack.change(lambda conn, org: new_kol(conn, org, "Cleo After"))
            stack.wait_for_events(2)
            time.sleep(PAST_IT)  # silent again for longer than the setting, but nothing missed since
            _tick(stack)
            _tick(stack)
        finally:
            revived.stop()
        recoveries = [request.json() for request in http.on("/hook")][len(alerts):]

    assert quiet == []
    [alert] = alerts
    assert (alert["incident"], alert["kind"], alert["org"], alert["subject"]) == (
        "receiver/default", "receiver_silent", "default", "receiver")
    assert alert["cause"].startswith("no webhook event received for ") and "kols added since" in alert["cause"]
    assert "COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES=0.03" in alert["cause"]
    assert stack.service.api_key not in alert["text"] and "Ben" not in alert["text"]
    assert len(mailbox.messages) == 2  # the alert and its recovery, by email too
    [recovery] = recoveries
    assert (recovery["state"], recovery["incident"]) == ("RECOVERED", "receiver/default")
    assert recovery["cause"].startswith("webhook events arrive again")
