"""Erasure, suppression and retention on an inbox in Postgres (COMMOPS_INBOX_URL), as a deployment with
receivers on several hosts keeps it: the person's events are found and erased there, the suppression list
and the erasure log live in the same database, so a receiver on another host (a data directory of its own)
drops the person's later events; retention deletes old applied events there."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from privacy.retention import apply_retention
from privacy.suppression import MOVED_SUFFIX, PRIVACY_FILE, PRIVACY_KEY_ENV, PrivacyStore
from privacy.subject import Subject
from resources.inbox import INBOX_URL_ENV, Inbox
from resources.inbox.envelope import parse_envelope
from resources.inbox.stores import POSTGRES_TABLE
from tests.pipeline.test_privacy_erase import _cli
from tests.receiver.conftest import SECRET, envelope, post_signed
from webhooks.receiver.server import ReceiverServer, ReceiverStartError
from webhooks.receiver.settings import ReceiverSettings

KEY = "test-privacy-key-not-a-secret"
PERSON = {"id": "kol_pgerase1", "email": "Pg.Erase.Marker@Clinic-Privacy.example", "notes": "PGERASEMARKNOTES"}
OTHER = {"id": "kol_pgkeep1", "email": "kept@clinic-privacy.example"}


@pytest.fixture
def inbox_url(postgres, monkeypatch) -> str:
    url = postgres.create_database(f"privacy_{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv(INBOX_URL_ENV, url)
    monkeypatch.setenv(PRIVACY_KEY_ENV, KEY)
    return url


def _receiver(data_dir, inbox_url) -> ReceiverServer:
    return ReceiverServer(ReceiverSettings(webhook_secrets=SECRET, data_dir=data_dir, inbox_url=inbox_url))


def _holding(postgres, url: str, needle: str) -> int:
    """Events of the Postgres inbox whose payload holds `needle` (read with Postgres's own reader)."""
    database = url.rsplit("/", 1)[1]
    [(count,)] = postgres.execute(f"SELECT count(*) FROM {POSTGRES_TABLE} WHERE position(%s IN lower(convert_from("
                                  "payload, 'UTF8'))) > 0", database, (needle.lower(),))
    return count


def test_an_erasure_reaches_the_postgres_inbox_and_every_receiver_host_keeps_the_person_out(
        inbox_url, postgres, tmp_path):
    host1, host2 = tmp_path / "host1", tmp_path / "host2"
    with _receiver(host1, inbox_url) as first, _receiver(host2, inbox_url) as second, \
            httpx.Client(timeout=10) as client:
        assert post_signed(client, first.url, envelope(data=PERSON)).status_code == 200
        assert post_signed(client, second.url, envelope(data=OTHER)).status_code == 200
        assert _holding(postgres, inbox_url, PERSON["email"]) == 1

        located = _cli("privacy", "locate", "--email", PERSON["email"].upper(), "--data-dir", str(host1))
        [line] = [line for line in located.splitlines() if line.lstrip().startswith("inbox")]
        assert line.split()[1] == "1" and f"postgresql://127.0.0.1:{postgres.port}/" in line, located
        assert f":{POSTGRES_TABLE}" in located and "postgres@" not in located  # never the URL's user

        erased = _cli("privacy", "erase", "--kol", PERSON["id"], "--data-dir", str(host1))
        assert "Erased 1 row(s)" in erased, erased
        assert _holding(postgres, inbox_url, PERSON["notes"]) == 0 and _holding(postgres, inbox_url, PERSON["id"]) == 0
        assert _holding(postgres, inbox_url, OTHER["id"]) == 1  # another person's event stays
        database = inbox_url.rsplit("/", 1)[1]
        [(vacuumed,)] = postgres.execute("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = %s",
                                         database, (POSTGRES_TABLE,))
        assert vacuumed  # the erasure's own VACUUM (autovacuum's are last_autovacuum): the deleted tuples freed
        # The list and the log are in the inbox's database (keyed hashes only), not in host1's directory.
        assert not (host1 / PRIVACY_FILE).exists()
        stored = repr(postgres.execute("SELECT * FROM commops_privacy_suppressed", database)
                      + postgres.execute("SELECT * FROM commops_privacy_log", database)).lower()
        assert stored.count("'kol'") == 1 and PERSON["id"] not in stored and "pg.erase.marker" not in stored
        assert [entry[2] for entry in PrivacyStore(host2).entries()] == ["erase"]
        assert "Nothing found" in _cli("privacy", "locate", "--kol", PERSON["id"], "--data-dir", str(host2))

        # The receiver on the other host, running since before the erasure, acknowledges the person's next
        # event and does not store it; its other events are stored as before.
        later = envelope(data={"id": PERSON["id"], "notes": PERSON["notes"] + " later"})
        assert post_signed(client, second.url, later).status_code == 200
        assert post_signed(client, second.url, envelope(data=OTHER)).status_code == 200
        assert Inbox(inbox_url).get([later["id"]]) == []
        assert _holding(postgres, inbox_url, PERSON["notes"]) == 0 and _holding(postgres, inbox_url, OTHER["id"]) == 2

    # A receiver started on a third host without the key refuses to start: the list it reads is the shared one.
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(PRIVACY_KEY_ENV)
        with pytest.raises(ReceiverStartError) as refused:
            _receiver(tmp_path / "host3", inbox_url).start()
    assert PRIVACY_KEY_ENV in str(refused.value) and "commops_privacy_suppressed" in str(refused.value)


def test_a_list_written_to_privacy_db_before_the_postgres_inbox_is_moved_into_postgres(inbox_url, tmp_path):
    host = tmp_path / "host1"
    local = PrivacyStore(host, location=host / "inbox" / "webhooks.db")  # as before COMMOPS_INBOX_URL was set
    local.suppress(KEY.encode(), Subject(kol_ids=(PERSON["id"],)))
    local.log("erase", "a-keyed-hash", {"inbox": 1}, 1)

    shared = PrivacyStore(tmp_path / "host2")  # another host: nothing of host1's file yet
    assert shared.listed() == 0
    assert PrivacyStore(host).listed() == 1  # host1's first use on Postgres copies its file in
    assert not (host / PRIVACY_FILE).exists() and (host / "inbox" / f"privacy.db{MOVED_SUFFIX}").exists()
    assert shared.is_listed(KEY.encode(), Subject(kol_ids=(PERSON["id"],)))
    assert [entry[2] for entry in shared.entries()] == ["erase"]


def test_retention_deletes_old_applied_events_of_the_postgres_inbox(inbox_url, postgres, tmp_path):
    today = datetime.now(UTC).date()
    inbox = Inbox(inbox_url)
    for n in range(10):
        body = json.dumps({"id": f"wh_evt_pgret{n}", "event": "kol.updated", "created_at": "2026-01-01T00:00:00Z",
                           "organization_id": "org_x", "data": {"id": "kol_a"}}).encode()
        inbox.add(body, parse_envelope(body))
    inbox.mark_applied([f"wh_evt_pgret{n}" for n in range(9)])  # the last one stays pending
    database = inbox_url.rsplit("/", 1)[1]
    for n in range(10):  # received n * 2 days ago
        postgres.execute(f"UPDATE {POSTGRES_TABLE} SET received_at = %s WHERE id = %s", database,
                         (f"{today - timedelta(days=2 * n)}T12:00:00.000000Z", f"wh_evt_pgret{n}"))
    removed = apply_retention(tmp_path / "data", today, days=7)

    kept = {event.id for event in inbox.get(f"wh_evt_pgret{n}" for n in range(10))}
    assert kept == {f"wh_evt_pgret{n}" for n in range(4)} | {"wh_evt_pgret9"}  # 0-6 days old, and the pending one
    assert removed.inbox_events == 5
    assert not (tmp_path / "data" / "inbox" / "webhooks.db").exists()  # the SQLite file was never the inbox
