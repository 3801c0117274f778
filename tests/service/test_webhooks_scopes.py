"""Changing webhooks needs the service's scope webhooks:write (besides the read scopes of
the events); keys created with `all`, before the scope existed too, keep working."""

from __future__ import annotations

import pytest

from commops_spec.constants import SCOPES as SPEC_SCOPES
from service.store import orgs
from service.store.db import connect, init_db
from tests.service.conftest import bearer, error_of

MISSING = "wh_doesnotexist"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/webhooks", {"url": "https://example.com/h", "events": ["kol.created"]}),
        ("PATCH", f"/webhooks/{MISSING}", {"enabled": False}),
        ("DELETE", f"/webhooks/{MISSING}", None),
        ("POST", f"/webhooks/{MISSING}/test", {"event": "kol.created"}),
        ("POST", f"/webhooks/{MISSING}/deliveries/whd_x/redeliver", None),
        ("POST", f"/webhooks/{MISSING}/redeliver", {"since": "2026-01-01T00:00:00Z"}),
    ],
)
def test_a_read_only_key_cannot_change_webhooks(api, dataset, method, path, body):
    """The issue's case: a key with only kols:read could register a webhook. The 403 comes
    before any lookup, so it does not reveal whether the webhook exists."""
    response = api.request(method, path, json=body, headers=bearer(dataset.read_only_key))
    assert error_of(response, 403, "insufficient_scope") == {"required_scope": "webhooks:write"}


def test_a_read_only_key_still_lists_the_webhooks_of_events_it_may_read(api, dataset):
    assert api.get("/webhooks", headers=bearer(dataset.read_only_key)).status_code == 200


def test_keys_created_with_all_hold_webhooks_write(dataset):
    conn = connect(dataset.db)
    try:
        key_id, _ = orgs.create_key(conn, dataset.org, "all")
    finally:
        conn.close()
    from service import admin

    [key] = [k for k in admin.list_keys(dataset.db) if k["id"] == key_id]
    assert "webhooks:write" in key["scopes"]


def test_the_migration_grants_webhooks_write_to_keys_that_held_every_spec_scope(tmp_path):
    db = tmp_path / "service.db"
    init_db(db)
    conn = connect(db)
    org = orgs.create_org(conn, "Old Keys", "enterprise")
    full_id, _ = orgs.create_key(conn, org, list(SPEC_SCOPES))  # what `all` meant before webhooks:write
    narrow_id, _ = orgs.create_key(conn, org, ["kols:read"])
    conn.execute("PRAGMA user_version = 0")  # as a database of the earlier schema
    conn.close()

    init_db(db)
    conn = connect(db)
    scopes = {row[0]: row[1].split(",") for row in conn.execute("SELECT id, scopes FROM api_keys")}
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    assert scopes[full_id] == [*SPEC_SCOPES, "webhooks:write"]
    assert scopes[narrow_id] == ["kols:read"]
    assert version == 1
