"""Two receivers (two "hosts": data dirs of their own) sharing one Postgres inbox (COMMOPS_INBOX_URL), as
behind a load balancer: a sender's retry may reach either, at the same moment as the first attempt."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.postgres import PostgresServer
from tests.receiver.conftest import body_of, envelope, post_signed
from tests.waiting import wait_until
from resources.inbox.envelope import parse_envelope
from resources.inbox import Inbox
from resources.inbox.stores import POSTGRES_TABLE

EVENTS = 60
CLIENTS = 8  # per receiver


def test_two_receivers_given_the_same_events_at_once_acknowledge_every_delivery_and_store_each_once(
    make_receiver, postgres: PostgresServer, tmp_path: Path
) -> None:
    inbox_url = postgres.create_database(f"inbox_{uuid.uuid4().hex[:12]}")
    receivers = [make_receiver(data_dir=tmp_path / f"host{n}", inbox_url=inbox_url) for n in (1, 2)]
    envs = [envelope("kol.created") for _ in range(EVENTS)]
    # Opposite orders: each receiver's group commit inserts ids the other is inserting in its own batch.
    plans = [(receivers[0].url, envs), (receivers[1].url, envs[::-1])]

    def deliver(url: str, batch: list[dict]) -> list[httpx.Response]:
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=CLIENTS)) as client, \
                ThreadPoolExecutor(CLIENTS) as pool:
            return list(pool.map(lambda env: post_signed(client, url, env), batch))

    with ThreadPoolExecutor(2) as pool:
        answers = [response for responses in pool.map(lambda plan: deliver(*plan), plans) for response in responses]

    assert [a.status_code for a in answers] == [200] * (2 * EVENTS), {a.status_code: a.text for a in answers}
    duplicates = sum(bool(a.json().get("duplicate")) for a in answers)
    assert duplicates == EVENTS  # each event acknowledged twice, stored by exactly one of the two
    inbox = Inbox(inbox_url)
    assert inbox.counts()["total"] == EVENTS
    assert sorted(e.id for e in inbox.get(env["id"] for env in envs)) == sorted(env["id"] for env in envs)


def test_a_batch_overlapping_another_receivers_uncommitted_batch_waits_for_it_and_never_deadlocks(
    postgres: PostgresServer,
) -> None:
    import psycopg2

    database = f"inbox_{uuid.uuid4().hex[:12]}"
    inbox = Inbox(postgres.create_database(database))
    first, second = sorted((envelope("kol.created") for _ in range(2)), key=lambda env: env["id"])
    other = psycopg2.connect(host=postgres.host, port=postgres.port, user="postgres", dbname=database)
    try:
        # The other receiver's group commit, open: it has inserted `first` and will insert `second` next.
        cursor = other.cursor()
        insert = (f"INSERT INTO {POSTGRES_TABLE} (id, event, created_at, received_at, payload, known_event)"
                  " VALUES (%s, 'kol.created', '2026-05-01T12:00:00.000000Z', 'now', '{}', true) ON CONFLICT (id) DO NOTHING")
        cursor.execute(insert, (first["id"],))
        added: list = []
        items = [(body_of(env), parse_envelope(body_of(env))) for env in (second, first)]  # requests in another order
        writer = threading.Thread(target=lambda: added.append(_outcome(inbox.add_many, items)))
        writer.start()
        wait_until(lambda: _waiting_on_a_lock(postgres, database), timeout=10, what="this receiver's insert to wait")
        cursor.execute(insert, (second["id"],))  # a deadlock here had this receiver inserted `second` already
        other.commit()
        writer.join(timeout=10)
    finally:
        other.close()
    assert added == [[False, False]]  # both stored by the other receiver: acknowledged as duplicates
    assert inbox.counts()["total"] == 2


def _outcome(call, *args):
    try:
        return call(*args)
    except Exception as error:  # noqa: BLE001 (the test reports it)
        return error


def _waiting_on_a_lock(postgres: PostgresServer, database: str) -> bool:
    return bool(postgres.execute("SELECT 1 FROM pg_stat_activity WHERE datname = %s AND application_name = 'commops-inbox'"
                                 " AND wait_event_type = 'Lock'", database, (database,)))
