"""The receiver as a client reaches it: real uvicorn on loopback, real inbox."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import httpx
import pytest

from commops_spec.constants import WEBHOOK_SIGNATURE_HEADER
from tests.python_clients import CLIENTS, post_with
from tests.receiver.conftest import SECRET, body_of, envelope, post_signed, signed_headers, wait_until
from resources.inbox import Inbox
from webhooks.signatures import sign
from webhooks.secrets_file import forget_secret, store_secret


def inbox_of(rx) -> Inbox:
    return Inbox(rx.settings.inbox_path)


def test_a_correctly_signed_event_is_committed_before_the_200(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope("kol.created")
    response = post_signed(client, rx.url, env)
    assert response.status_code == 200, response.text
    assert response.json() == {"id": env["id"], "duplicate": False}
    [stored] = inbox_of(rx).get([env["id"]])  # visible at once, from another connection
    assert stored.payload == body_of(env) and stored.known_event


def test_a_wrong_signature_is_401_and_nothing_is_stored(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope()
    response = post_signed(client, rx.url, env, secret="not-the-secret-" + "x" * 20)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert inbox_of(rx).counts()["total"] == 0


def test_a_signature_over_other_bytes_is_401(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope()
    body = body_of(env)
    reformatted = json.dumps(env, indent=2).encode()  # same JSON, other bytes
    response = client.post(rx.url, content=reformatted, headers=signed_headers(SECRET, body))
    assert response.status_code == 401


def test_a_missing_signature_is_401(make_receiver, client) -> None:
    rx = make_receiver()
    response = client.post(rx.url, content=body_of(envelope()), headers={"Content-Type": "application/json"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    "header",
    [
        b"\xff" * 64,  # not ASCII
        "é".encode() * 32,  # UTF-8, 64 bytes
        b"",
        b"abc",
        b"0" * 63,
        b"0" * 65,
        b"g" * 64,
        b"0" * 31 + b" " + b"0" * 32,
    ],
    ids=["latin1", "utf8", "empty", "short", "63", "65", "non-hex", "space"],
)
def test_a_malformed_signature_header_is_401_never_500(make_receiver, client, header: bytes) -> None:
    rx = make_receiver()
    response = client.post(rx.url, content=body_of(envelope()), headers={WEBHOOK_SIGNATURE_HEADER: header})
    assert response.status_code == 401


def test_an_upper_case_signature_is_401(make_receiver, client) -> None:
    rx = make_receiver()
    body = body_of(envelope())
    response = client.post(rx.url, content=body, headers={WEBHOOK_SIGNATURE_HEADER: sign(SECRET, body).upper()})
    assert response.status_code == 401


def test_two_signature_headers_are_401(make_receiver, client) -> None:
    rx = make_receiver()
    body = body_of(envelope())
    good = sign(SECRET, body)
    headers = [(WEBHOOK_SIGNATURE_HEADER, good), (WEBHOOK_SIGNATURE_HEADER, good)]
    assert client.post(rx.url, content=body, headers=headers).status_code == 401


def test_every_configured_secret_is_accepted(make_receiver, client) -> None:
    rx = make_receiver(secrets=f"{SECRET}, second-secret-{'b' * 20} ,")
    assert post_signed(client, rx.url, envelope()).status_code == 200
    assert post_signed(client, rx.url, envelope(), secret=f"second-secret-{'b' * 20}").status_code == 200
    assert inbox_of(rx).counts()["total"] == 2


def test_secrets_file_changes_apply_without_a_restart(make_receiver, client, tmp_path: Path) -> None:
    """Rotation: a secret added to the file is accepted at once; a removed one is refused."""
    rx = make_receiver(secrets="")
    secrets_file = rx.settings.secrets_file
    new_secret = "rotated-" + "c" * 56
    assert post_signed(client, rx.url, envelope(), secret=new_secret).status_code == 401
    store_secret(secrets_file, "wh_new", new_secret)
    assert stat.S_IMODE(os.stat(secrets_file).st_mode) == 0o600
    assert post_signed(client, rx.url, envelope(), secret=new_secret).status_code == 200
    store_secret(secrets_file, "wh_old", SECRET)
    assert post_signed(client, rx.url, envelope(), secret=SECRET).status_code == 200
    assert post_signed(client, rx.url, envelope(), secret=new_secret).status_code == 200
    forget_secret(secrets_file, "wh_old")
    assert post_signed(client, rx.url, envelope(), secret=SECRET).status_code == 401
    assert post_signed(client, rx.url, envelope(), secret=new_secret).status_code == 200


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"event": "kol.created", "created_at": "t", "data": {}}).encode(), "lacks id"),
        (json.dumps({"id": "wh_evt_1", "created_at": "t", "data": {}}).encode(), "lacks event"),
        (json.dumps({"id": "wh_evt_1", "event": "kol.created", "data": {}}).encode(), "lacks created_at"),
        (json.dumps({"id": "wh_evt_1", "event": "kol.created", "created_at": "t"}).encode(), "lacks data"),
        (json.dumps({"id": 7, "event": "kol.created", "created_at": "t", "data": {}}).encode(), "id must be"),
        (json.dumps({"id": "wh_evt_1", "event": "kol.created", "created_at": "t", "data": []}).encode(), "data must"),
    ],
    ids=["json", "utf8", "array", "no-id", "no-event", "no-created_at", "no-data", "id-type", "data-type"],
)
def test_a_signed_but_malformed_body_is_400(make_receiver, client, body: bytes, reason: str) -> None:
    rx = make_receiver()
    response = client.post(rx.url, content=body, headers=signed_headers(SECRET, body))
    assert response.status_code == 400, response.text
    assert reason in response.json()["error"]["message"]
    assert inbox_of(rx).counts()["total"] == 0


@pytest.mark.parametrize("created_at", ["2026-11-22 at ten", "2026-13-40T10:00:00Z", "yesterday"])
def test_an_unreadable_created_at_is_400_naming_created_at_and_nothing_is_stored(make_receiver, client, created_at) -> None:
    rx = make_receiver()
    response = post_signed(client, rx.url, envelope(created_at=created_at))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_envelope"
    assert response.json()["error"]["message"].startswith("created_at is not an ISO 8601 timestamp")
    assert inbox_of(rx).counts()["total"] == 0


def test_a_created_at_without_zone_designator_is_stored_and_reads_as_utc(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope(created_at="2026-11-22T10:00:00")
    assert post_signed(client, rx.url, env).status_code == 200
    [stored] = inbox_of(rx).get([env["id"]])
    assert stored.created_at == "2026-11-22T10:00:00"  # as sent
    assert stored.envelope().created_at.isoformat() == "2026-11-22T10:00:00+00:00"


def test_a_body_above_the_cap_is_413(make_receiver, client) -> None:
    rx = make_receiver(webhook_max_body_bytes=1024)
    env = envelope(padding="x" * 2000)
    assert post_signed(client, rx.url, env).status_code == 413
    small = envelope()
    assert len(body_of(small)) < 1024
    assert post_signed(client, rx.url, small).status_code == 200


@pytest.mark.parametrize("client", CLIENTS)
def test_a_python_client_sending_a_body_over_the_cap_reads_the_413(make_receiver, client) -> None:
    """4 MB, more than the sockets buffer: undrained, the connection resets under the client's send."""
    rx = make_receiver(webhook_max_body_bytes=2 * 1024 * 1024)
    body = body_of(envelope(padding="x" * 4_000_000))
    status, answer = post_with(client, rx.url, body, signed_headers(SECRET, body))
    assert status == 413
    assert answer["error"]["code"] == "payload_too_large"
    assert inbox_of(rx).counts()["total"] == 0


def test_a_streamed_body_without_length_is_cut_at_the_cap(make_receiver) -> None:
    """Chunked upload, no Content-Length: the receiver stops reading past the cap and answers 413."""
    rx = make_receiver(webhook_max_body_bytes=64 * 1024)
    sent = {"bytes": 0}

    def chunks():
        for _ in range(10_000):  # would be 640 MB
            sent["bytes"] += 65_536
            yield b" " * 65_536

    with httpx.Client(timeout=10) as c:
        try:
            response = c.post(rx.url, content=chunks(), headers={WEBHOOK_SIGNATURE_HEADER: "0" * 64})
            assert response.status_code == 413
        except httpx.HTTPError:
            pass  # the receiver may close the connection while we still send: fine, it did not read on
    assert sent["bytes"] < 100 * 65_536


def test_a_repeated_event_id_is_acknowledged_and_stored_once(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope()
    first = post_signed(client, rx.url, env)
    again = post_signed(client, rx.url, env)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == {"id": env["id"], "duplicate": True}
    assert inbox_of(rx).counts()["total"] == 1


def test_concurrent_duplicates_are_stored_once(make_receiver) -> None:
    from concurrent.futures import ThreadPoolExecutor

    rx = make_receiver()
    envs = [envelope() for _ in range(50)]
    with httpx.Client(timeout=10, limits=httpx.Limits(max_connections=16)) as c:
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda env: post_signed(c, rx.url, env).status_code, envs * 4))
    assert answers == [200] * 200
    assert inbox_of(rx).counts()["total"] == 50


def test_unknown_event_names_are_stored_and_flagged(make_receiver, client) -> None:
    rx = make_receiver()
    env = envelope("kol.teleported")
    assert post_signed(client, rx.url, env).status_code == 200
    [stored] = inbox_of(rx).get([env["id"]])
    assert stored.known_event is False


def test_health_answers_with_the_number_of_secrets_not_the_secrets(make_receiver, client) -> None:
    rx = make_receiver(secrets=f"{SECRET},other-{'d' * 20}")
    response = client.get(rx.base_url + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "secrets": 2, "unverified_bytes": 0, "refused": {}}
    assert SECRET not in response.text


def test_other_paths_and_methods_are_refused(make_receiver, client) -> None:
    rx = make_receiver()
    assert client.get(rx.url).status_code == 405
    assert client.post(rx.base_url + "/webhooks/other", content=b"{}").status_code == 404


def test_secrets_never_reach_the_log(make_receiver, client, caplog) -> None:
    rx = make_receiver()
    with caplog.at_level("DEBUG"):
        post_signed(client, rx.url, envelope(), secret="wrong-" + "e" * 30)
        post_signed(client, rx.url, envelope())
    assert "deliveries refused: 1 (1 invalid_signature) from 127.0.0.1" in caplog.text
    assert SECRET not in caplog.text and "wrong-" not in caplog.text


@pytest.mark.parametrize(("forwarded_allow_ips", "logged"), [("", "127.0.0.1"), ("127.0.0.1", "203.0.113.9")])
def test_x_forwarded_for_names_the_client_only_from_a_named_proxy(make_receiver, client, caplog, forwarded_allow_ips,
                                                                  logged) -> None:
    rx = make_receiver(forwarded_allow_ips=forwarded_allow_ips)
    body = body_of(envelope())
    with caplog.at_level("WARNING", logger="webhooks.receiver"):
        refused = client.post(rx.url, content=body, headers={**signed_headers("wrong-" + "e" * 30, body),
                                                             "X-Forwarded-For": "203.0.113.9"})
    assert refused.status_code == 401
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deliveries refused:")]
    assert line.startswith(f"deliveries refused: 1 (1 invalid_signature) from {logged}"), line


def test_the_receiver_restarts_over_the_same_inbox(make_receiver, client, tmp_path: Path) -> None:
    data = tmp_path / "shared"
    env = envelope()
    rx = make_receiver(data_dir=data)
    post_signed(client, rx.url, env)
    rx.stop()
    again = make_receiver(data_dir=data)
    assert post_signed(client, again.url, env).json()["duplicate"] is True
    assert (data / "inbox" / "webhooks.db").exists()


def _port_in_use() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_cli_reports_a_taken_port_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from commops_cli.commops import main

    taken = _port_in_use()
    try:
        result = CliRunner().invoke(main, ["receiver", "run", "--port", str(taken.getsockname()[1]),
                                           "--data-dir", str(tmp_path)])
    finally:
        taken.close()
    assert result.exit_code == 1
    assert "is in use" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_reports_an_unwritable_data_dir_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from commops_cli.commops import main

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data dir should be")
    result = CliRunner().invoke(main, ["receiver", "run", "--port", "0", "--data-dir", str(blocker)])
    assert result.exit_code == 1
    assert "cannot open the inbox" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
