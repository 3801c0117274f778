"""One organization's secret verifies only its own events: a secret bound to an organization
(`org_...=secret` in COMMOPS_WEBHOOK_SECRETS, `organization_id` beside it in the secrets file, written by
`commops webhooks register --org NAME`) never lets that organization's service write events naming
another. Unbound secrets keep verifying any event (the single-organization setup)."""

from __future__ import annotations

from tests.receiver.conftest import SECRET, envelope, post_signed
from webhook_receiver.inbox import Inbox
from webhook_receiver.secrets_file import store_secret

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
