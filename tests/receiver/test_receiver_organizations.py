"""One organization's secret verifies only its own events: a secret bound to an organization
(`org_...=secret` in COMMOPS_WEBHOOK_SECRETS, `organization_id` beside it in the secrets file, written by
`commops webhooks register --org NAME`) never lets that organization's service write events naming
another. Unbound secrets keep verifying any event (the single-organization setup)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
from click.testing import CliRunner

from tests.receiver.conftest import SECRET, envelope, post_signed, wait_until
from tests.service.webhook_support import webhook_service
from resources.orgs import OrgRegistry, check_org
from resources.inbox import Inbox
from webhooks.secrets_file import store_secret
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings

SECRET_A = "secret-of-a-" + "a" * 40
SECRET_B = "secret-of-b-" + "b" * 40


def _refused(client, rx) -> dict:
    return client.get(rx.base_url + "/healthz").json()["refused"]


def test_an_event_signed_with_one_organizations_secret_and_naming_another_is_401_and_counted(make_receiver, client) -> None:
    rx = make_receiver(secrets=f"org_a={SECRET_A}, org_b={SECRET_B}")
    forged = post_signed(client, rx.url, envelope(organization_id="org_b"), secret=SECRET_A)
    assert forged.status_code == 401
    assert forged.json()["error"]["code"] == "wrong_organization"
    nameless = post_signed(client, rx.url, envelope(organization_id=None), secret=SECRET_A)
    assert nameless.status_code == 401
    assert _refused(client, rx) == {"wrong_organization": 2}
    assert Inbox(rx.settings.inbox_path).counts()["total"] == 0

    assert post_signed(client, rx.url, envelope(organization_id="org_a"), secret=SECRET_A).status_code == 200
    assert post_signed(client, rx.url, envelope(organization_id="org_b"), secret=SECRET_B).status_code == 200
    assert Inbox(rx.settings.inbox_path).counts()["total"] == 2


def test_an_unbound_secret_keeps_verifying_events_of_any_organization(make_receiver, client) -> None:
    odd_secret = "not_an_org_id=" + "c" * 40  # text before `=` that is no organization id: one unbound secret
    rx = make_receiver(secrets=f"{SECRET},{odd_secret}")
    assert post_signed(client, rx.url, envelope(organization_id="org_test")).status_code == 200
    assert post_signed(client, rx.url, envelope(organization_id=None)).status_code == 200
    assert post_signed(client, rx.url, envelope(organization_id="org_other"), secret=odd_secret).status_code == 200


def test_a_secret_bound_in_the_secrets_file_verifies_only_its_organizations_events(make_receiver, client) -> None:
    rx = make_receiver(secrets="")
    store_secret(rx.settings.secrets_file, "wh_a", SECRET_A, url=rx.url, organization_id="org_a")
    forged = post_signed(client, rx.url, envelope(organization_id="org_b"), secret=SECRET_A)
    assert (forged.status_code, forged.json()["error"]["code"]) == (401, "wrong_organization")
    assert post_signed(client, rx.url, envelope(organization_id="org_a"), secret=SECRET_A).status_code == 200
    assert _refused(client, rx) == {"wrong_organization": 1}


def test_commops_webhooks_register_with_org_binds_the_secret_so_each_service_writes_only_its_own_events(
        tmp_path: Path, monkeypatch) -> None:
    from commops_cli.commops import main

    data_dir = tmp_path / "data"
    with webhook_service(tmp_path / "service.db") as service:
        with sqlite3.connect(service.db) as db:
            [(other_id,)] = db.execute("SELECT id FROM organizations WHERE id != ?", [service.org_id]).fetchall()
        registry = OrgRegistry(data_dir)
        registry.add(check_org("acme", service.server.base_url, "ACME_KEY", service.org_id))
        registry.add(check_org("other", service.server.base_url, "OTHER_KEY", other_id))
        registry.add(check_org("no-id", service.server.base_url, "ACME_KEY", None))
        for name in ("COMMOPS_BASE_URL", "COMMOPS_API_KEY", "COMMOPS_ORGS_URL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("ACME_KEY", service.key)
        monkeypatch.setenv("OTHER_KEY", service.other_key)
        rx = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
        try:
            webhook_ids = {}
            for org in ("acme", "other"):
                result = CliRunner().invoke(main, ["webhooks", "register", rx.url, "--org", org, "--events", "kol.created",
                                                   "--data-dir", str(data_dir)])
                assert result.exit_code == 0, result.output
                webhook_ids[org] = result.output.strip().splitlines()[-1]
            entries = json.loads(rx.settings.secrets_file.read_text())
            bound = {org: entries[webhook_id]["organization_id"] for org, webhook_id in webhook_ids.items()}
            assert bound == {"acme": service.org_id, "other": other_id}

            for key in (service.key, service.other_key):  # each service delivers its own event: both accepted
                with service.client(key) as api:
                    assert api.post("/kols", json={"full_name": "Dr Bound", "specialties": ["cardiology"]}).status_code == 201
            inbox = Inbox(rx.settings.inbox_path)
            wait_until(lambda: inbox.counts()["total"] == 2, timeout=30, what="both organizations' kol.created")
            assert {event.organization_id for event in inbox.pending()} == {service.org_id, other_id}

            other_secret = entries[webhook_ids["other"]]["secret"]
            with httpx.Client(timeout=10) as client:  # the other organization's service forging acme's event
                forged = post_signed(client, rx.url, envelope(organization_id=service.org_id), secret=other_secret)
                assert (forged.status_code, forged.json()["error"]["code"]) == (401, "wrong_organization")
                assert _refused(client, rx) == {"wrong_organization": 1}
            assert inbox.counts()["total"] == 2

            for org, cause in (("nobody", "unknown organization 'nobody'"), ("no-id", "no-id has no organization id")):
                refused = CliRunner().invoke(main, ["webhooks", "register", rx.url, "--org", org, "--data-dir",
                                                    str(data_dir)])
                assert refused.exit_code == 1 and cause in refused.output, refused.output
                assert len(refused.output.strip().splitlines()) == 1
            assert len(json.loads(rx.settings.secrets_file.read_text())) == 2  # nothing written for them
        finally:
            rx.stop()
