"""The service's real webhook worker delivering to the receiver over loopback, managed with
`commops webhooks`, including a secret rotation in the middle of a stream of events."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from webhooks.subscriptions import Subscriptions
from tests.receiver.conftest import wait_until
from tests.service.webhook_support import webhook_service
from resources.inbox import Inbox
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings
from webhooks.signatures import read_secrets_file


@pytest.fixture
def stack(tmp_path: Path):
    """A real service (delivery worker on, fast retries, loopback allowed) and a receiver that
    knows no secret but the secrets file."""
    data_dir = tmp_path / "data"
    with webhook_service(tmp_path / "service.db") as service:
        rx = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
        try:
            yield service, rx
        finally:
            rx.stop()


def _create_kols(api, count: int, tag: str, into: list[str] | None = None) -> list[str]:
    ids = into if into is not None else []
    for i in range(count):
        response = api.post("/kols", json={"full_name": f"Dr {tag} {i}", "specialties": ["cardiology"]})
        assert response.status_code == 201, response.text
        ids.append(response.json()["data"]["id"])
    return ids


def _stored_kol_ids(inbox: Inbox) -> list[str]:
    return [event.envelope().data["id"] for event in inbox.pending() if event.event == "kol.created"]


def test_the_service_delivers_every_event_once_through_a_secret_rotation(stack, caplog) -> None:
    service, rx = stack
    secrets_file = rx.settings.secrets_file
    inbox = Inbox(rx.settings.inbox_path)
    created: list[str] = []
    with caplog.at_level(logging.WARNING, logger="webhooks.receiver"), \
            Subscriptions(service.server.base_url, service.key) as subs, service.client() as api:
        old = subs.register(rx.url, ["kol.created", "kol.updated"], secrets_file)
        assert stat.S_IMODE(os.stat(secrets_file).st_mode) == 0o600

        rotated = threading.Event()
        failed: list[BaseException] = []

        def stream() -> None:  # 40 events before the rotation, events during it, 40 after it
            try:
                _create_kols(api, 40, "before", created)
                while not rotated.is_set():
                    _create_kols(api, 1, f"during {len(created)}", created)
                _create_kols(api, 40, "after", created)
            except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
                failed.append(exc)
                rotated.set()

        producer = threading.Thread(target=stream)
        producer.start()
        try:
            wait_until(lambda: len(created) >= 40 or failed, timeout=60)
            started_at = len(created)
            new = subs.rotate(old["id"], secrets_file, timeout=60, poll_seconds=0.02)  # during the stream
            finished_at = len(created)
        finally:
            rotated.set()
            producer.join(timeout=120)
        assert not failed and not producer.is_alive()
        assert finished_at > started_at, "events should be created while the rotation runs"
        total = len(created)

        assert sorted(read_secrets_file(secrets_file)) == sorted([old["id"], new["id"]])  # old: grace period
        assert list(read_secrets_file(secrets_file, now=time.time() + 301)) == [new["id"]]
        assert [w["id"] for w in subs.list()] == [new["id"]]
        wait_until(lambda: len(_stored_kol_ids(inbox)) >= total, timeout=60)
        late = _create_kols(api, 5, "late")  # only the new webhook (new secret) delivers these
        wait_until(lambda: len(_stored_kol_ids(inbox)) >= total + 5, timeout=30)

    stored = _stored_kol_ids(inbox)
    assert sorted(stored) == sorted(created + late)  # every event, each once
    assert inbox.counts()["total"] == total + 5
    refused = [r for r in caplog.records if "deliveries refused" in r.getMessage()]
    assert refused == [], "no delivery may be refused: both secrets were accepted throughout"


def test_commops_webhooks_commands_against_the_real_service(stack, monkeypatch) -> None:
    from commops_cli.commops import main

    service, rx = stack
    data_dir = str(rx.settings.data_dir)
    monkeypatch.setenv("COMMOPS_BASE_URL", service.server.base_url)
    monkeypatch.setenv("COMMOPS_API_KEY", service.key)
    runner = CliRunner()

    registered = runner.invoke(main, ["webhooks", "register", rx.url, "--events", "kol.created",
                                      "--data-dir", data_dir])
    assert registered.exit_code == 0, registered.output
    webhook_id = registered.output.strip().splitlines()[-1]
    secret = read_secrets_file(rx.settings.secrets_file)[webhook_id]
    assert secret not in registered.output and len(secret) == 64

    listed = runner.invoke(main, ["webhooks", "list"])
    assert webhook_id in listed.output and rx.url in listed.output and secret not in listed.output

    tested = runner.invoke(main, ["webhooks", "test", webhook_id, "--event", "signal.new"])
    assert tested.exit_code == 0 and ": 200 in" in tested.output, tested.output
    [sample] = Inbox(rx.settings.inbox_path).pending()
    assert sample.event == "signal.new" and sample.known_event

    updated = runner.invoke(main, ["webhooks", "update", webhook_id, "--disable", "--events", "kol.created,kol.updated"])
    assert updated.exit_code == 0 and "disabled, 2 events" in updated.output, updated.output

    deleted = runner.invoke(main, ["webhooks", "delete", webhook_id, "--grace", "0", "--data-dir", data_dir])
    assert deleted.exit_code == 0, deleted.output
    assert webhook_id not in read_secrets_file(rx.settings.secrets_file)
    gone = runner.invoke(main, ["webhooks", "delete", webhook_id, "--data-dir", data_dir])
    assert gone.exit_code == 1 and "404" in gone.output


def test_commops_webhooks_errors_are_one_line_and_name_the_cause(stack, monkeypatch) -> None:
    from commops_cli.commops import main
    from service import admin

    service, rx = stack
    runner = CliRunner()
    monkeypatch.delenv("COMMOPS_BASE_URL", raising=False)
    monkeypatch.delenv("COMMOPS_API_KEY", raising=False)
    missing = runner.invoke(main, ["webhooks", "list"])
    assert missing.exit_code == 1 and "COMMOPS_BASE_URL is not set" in missing.output

    monkeypatch.setenv("COMMOPS_BASE_URL", service.server.base_url)
    monkeypatch.setenv("COMMOPS_API_KEY", "cos_not-a-real-key")
    rejected = runner.invoke(main, ["webhooks", "list"])
    assert rejected.exit_code == 1 and "check COMMOPS_API_KEY" in rejected.output

    monkeypatch.setenv("COMMOPS_API_KEY", admin.create_key(service.db, service.org_id, ["kols:read"]))
    refused = runner.invoke(main, ["webhooks", "register", rx.url, "--events", "kol.created",
                                   "--data-dir", str(rx.settings.data_dir)])
    assert refused.exit_code == 1 and "this key lacks scope webhooks:write" in refused.output, refused.output
    assert read_secrets_file(rx.settings.secrets_file) == {}  # the provisional secret was taken back
    for result in (missing, rejected, refused):
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
