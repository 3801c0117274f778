"""Webhook receivers on loopback, private and link-local addresses are opt-in: refused by
default at registration (every numeric form of an IPv4 literal too), by /test, and at
delivery; a refused target is never contacted, so nothing of it is echoed."""

from __future__ import annotations

import pytest
from httpx import URL

from service.routes.webhooks import _obviously_private
from service.webhooks.config import WebhookConfig
from tests.service.conftest import error_of
from tests.service.test_webhooks_delivery import add_webhook, deliveries, emit
from tests.service.webhook_support import (  # noqa: F401 (fixtures)
    receiver,
    running_worker,
    service_db,
    wait_until,
    webhook_service,
)

REFUSED_URLS = [
    "http://127.0.0.1:9/x",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://10.0.0.5/x",
    "http://192.168.1.1/x",
    "http://localhost:9/x",
    "http://LOCALHOST./x",
    "http://api.localhost/x",
    "http://[::1]:9/x",
    "http://[::ffff:127.0.0.1]/x",
    "http://2130706433/x",  # 127.0.0.1 as one number
    "http://127.1/x",  # short form
    "http://0x7f.1/x",  # hexadecimal
    "http://0177.0.1/x",  # octal (httpx itself refuses the 4-part octal form as an invalid URL)
    "http://0x7f000001/x",
    "http://127.0.0.1./x",  # trailing dot
]
# IPv6 addresses carrying 127.0.0.1: NAT64, 6to4 and IPv4-compatible
EMBEDDED_LOOPBACK_URLS = ["http://[64:ff9b::7f00:1]/x", "http://[2002:7f00:1::]/x", "http://[::127.0.0.1]/x"]


@pytest.mark.parametrize("url", REFUSED_URLS + EMBEDDED_LOOPBACK_URLS)
def test_private_targets_are_refused_at_registration_by_default(api, url):
    """`api` is the shared service with default webhook settings."""
    details = error_of(api.post("/webhooks", json={"url": url, "events": ["kol.created"]}), 400, "invalid_request")
    assert details["field"] == "url" and details["reason"] == "private_address"


@pytest.mark.parametrize("url", ["https://example.com/hook", "https://8.8.8.8/hook", "https://127-0-0-1.example/h",
                                 "https://1e100.net/h"])
def test_public_looking_targets_are_not_refused_at_registration(url):
    assert not _obviously_private(URL(url).host)


def test_a_target_registered_while_allowed_is_refused_by_test_once_the_opt_in_is_off(tmp_path, rx):
    db = tmp_path / "service.db"
    rx.behave("/internal", status=200)
    with webhook_service(db, webhook_allow_private=True) as allowed, allowed.client() as client:
        webhook = client.post("/webhooks", json={"url": rx.url("/internal"), "events": ["kol.created"]}).json()["data"]
    with webhook_service(db, webhook_allow_private=False) as refused, refused.client(allowed.key) as client:
        response = client.post(f"/webhooks/{webhook['id']}/test", json={"event": "kol.created"})
    details = error_of(response, 400, "invalid_request")
    assert details["field"] == "url" and details["reason"] == "private_address"
    assert "response_excerpt" not in response.text and rx.at("/internal") == []  # never contacted, nothing echoed


@pytest.mark.parametrize("url", EMBEDDED_LOOPBACK_URLS)
def test_test_refuses_an_ipv6_address_carrying_a_loopback_ipv4_one(tmp_path, url):
    db = tmp_path / "service.db"
    with webhook_service(db, webhook_allow_private=True) as allowed, allowed.client() as client:
        webhook = client.post("/webhooks", json={"url": url, "events": ["kol.created"]}).json()["data"]
    with webhook_service(db, webhook_allow_private=False) as refused, refused.client(allowed.key) as client:
        response = client.post(f"/webhooks/{webhook['id']}/test", json={"event": "kol.created"})
    details = error_of(response, 400, "invalid_request")
    assert details["field"] == "url" and details["reason"] == "private_address"


def test_the_opt_in_allows_loopback_receivers(tmp_path, rx):
    with webhook_service(tmp_path / "service.db", webhook_allow_private=True) as service, service.client() as client:
        created = client.post("/webhooks", json={"url": rx.url("/ok"), "events": ["kol.created"]})
        assert created.status_code == 201, created.text
        tested = client.post(f"/webhooks/{created.json()['data']['id']}/test", json={"event": "kol.created"})
    assert tested.status_code == 200 and tested.json()["data"]["success"] is True


def test_the_delivery_worker_refuses_loopback_receivers_by_default(service_db, receiver):
    webhook_id = add_webhook(service_db, f"http://localhost:{receiver.port}/internal")
    config = WebhookConfig(db=service_db.path, time_scale=0.00002,
                           attempt_timeout_seconds=2.0)  # allow_private left at its default
    with running_worker(config):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["attempts"])
    first = deliveries(service_db, webhook_id)[0]["attempts"][0]
    assert first["error"].startswith("address_refused") and first["status_code"] is None
    assert first["response_excerpt"] is None
    assert receiver.at("/internal") == []


@pytest.mark.parametrize("host", ["[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]"])
def test_the_delivery_worker_refuses_ipv6_addresses_carrying_a_loopback_ipv4_one(service_db, receiver, host):
    """Checked on the address connected to: the attempt ends before any connection is tried."""
    webhook_id = add_webhook(service_db, f"http://{host}:{receiver.port}/internal")
    with running_worker(service_db.config(allow_private=False)):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["attempts"])
    first = deliveries(service_db, webhook_id)[0]["attempts"][0]
    assert first["error"].startswith("address_refused"), first["error"]
    assert first["status_code"] is None and first["response_excerpt"] is None
