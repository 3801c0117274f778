"""What a stranger can make the receiver hold before a signature is checked: a request without a
signature header is refused from its headers; the bytes of bodies not verified yet are capped, all
requests together (503 with Retry-After past the cap), while ordinary bursts pass; refusals are logged
as one counted line per interval; a body no parser can read is a 400, never a 500. Real uvicorn on
loopback, requests written on raw sockets where the test needs a body sent only in part."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from commops_spec.constants import WEBHOOK_SIGNATURE_HEADER
from tests.receiver.conftest import SECRET, body_of, envelope, signed_headers, wait_until
from webhooks.receiver.delivery_log import CountLog
from resources.inbox import Inbox
from webhooks.receiver.settings import load_receiver_settings

ANSWER_SECONDS = 10.0  # a refusal from the headers comes at once; today's code waited for the whole body
WRONG_SIGNATURE = "0" * 64  # well formed: only the body's HMAC can tell it is wrong


@contextmanager
def connection(rx) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", rx.port), timeout=ANSWER_SECONDS)
    try:
        yield sock
    finally:
        sock.close()


def send_head(sock: socket.socket, length: int, headers: dict[str, str] | None = None) -> None:
    lines = ["POST /webhooks/commops HTTP/1.1", "Host: receiver", "Content-Type: application/json",
             f"Content-Length: {length}", *(f"{name}: {value}" for name, value in (headers or {}).items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], dict]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read() or b"{}")


def health(rx) -> dict:
    return httpx.get(rx.base_url + "/healthz", timeout=5).json()


def test_a_request_without_a_signature_header_is_refused_before_its_body_is_read(make_receiver) -> None:
    rx = make_receiver()
    with connection(rx) as sock:
        send_head(sock, 15 * 1024 * 1024)  # 15 MiB announced, 1 KiB sent: the answer cannot wait for the rest
        sock.sendall(b"{" + b" " * 1023)
        status, _, answer = read_answer(sock)
    assert status == 401
    assert answer["error"]["code"] == "invalid_signature"
    assert health(rx)["refused"] == {"no_signature": 1}


@pytest.mark.parametrize("header", ["", "abc", "0" * 63, "A" * 64])
def test_a_malformed_signature_header_is_refused_before_the_body_too(make_receiver, header: str) -> None:
    rx = make_receiver()
    with connection(rx) as sock:
        send_head(sock, 15 * 1024 * 1024, {WEBHOOK_SIGNATURE_HEADER: header})
        sock.sendall(b" " * 1024)
        status, _, _ = read_answer(sock)
    assert status == 401


def test_sixteen_signed_deliveries_in_flight_at_once_are_all_accepted_under_the_default_cap(make_receiver) -> None:
    rx = make_receiver()
    bodies = [body_of(envelope(padding="x" * 256 * 1024)) for _ in range(16)]
    sockets = [socket.create_connection(("127.0.0.1", rx.port), timeout=ANSWER_SECONDS) for _ in bodies]
    try:
        for sock, body in zip(sockets, bodies, strict=True):  # every body sent but its last byte: all unverified
            send_head(sock, len(body), signed_headers(SECRET, body))
            sock.sendall(body[:-1])
        in_flight = sum(len(body) - 1 for body in bodies)
        wait_until(lambda: health(rx)["unverified_bytes"] == in_flight, timeout=20, what="every body held at once")
        for sock, body in zip(sockets, bodies, strict=True):
            sock.sendall(body[-1:])
        answers = [read_answer(sock)[0] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert answers == [200] * 16
    assert Inbox(rx.settings.inbox_path).counts()["total"] == 16
    assert health(rx)["unverified_bytes"] == 0


def test_past_the_cap_on_unverified_bytes_a_delivery_gets_503_with_retry_after_until_the_bytes_are_released(
        make_receiver) -> None:
    rx = make_receiver(webhook_max_body_bytes=64 * 1024, webhook_unverified_bytes=100 * 1024)
    delivery = envelope(padding="x" * 50_000)
    body = body_of(delivery)
    with connection(rx) as stalled:  # a stranger's body, well-formed signature, 59,000 bytes sent and stalled
        send_head(stalled, 60_000, {WEBHOOK_SIGNATURE_HEADER: WRONG_SIGNATURE})
        stalled.sendall(b" " * 59_000)
        wait_until(lambda: health(rx)["unverified_bytes"] == 59_000, timeout=20, what="the stalled body held")

        with httpx.Client(timeout=ANSWER_SECONDS) as client:
            announced = client.post(rx.url, content=body, headers=signed_headers(SECRET, body))
            chunked = client.post(rx.url, content=iter([body[:20_000], body[20_000:40_000], body[40_000:]]),
                                  headers=signed_headers(SECRET, body))  # no Content-Length: refused while read
        for refused in (announced, chunked):
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "5"
            assert refused.json()["error"]["code"] == "receiver_busy"
        assert Inbox(rx.settings.inbox_path).counts()["total"] == 0
    wait_until(lambda: health(rx)["unverified_bytes"] == 0, timeout=20, what="the stalled body released")

    with httpx.Client(timeout=ANSWER_SECONDS) as client:
        assert client.post(rx.url, content=body, headers=signed_headers(SECRET, body)).status_code == 200
    assert health(rx)["refused"]["receiver_busy"] == 2


def test_refusals_are_logged_as_one_counted_line_per_interval(make_receiver, caplog) -> None:
    rx = make_receiver()
    body = body_of(envelope())
    started = time.monotonic()
    with caplog.at_level("INFO", logger="webhooks.receiver"), httpx.Client(timeout=10) as client:
        for _ in range(40):
            assert client.post(rx.url, content=body).status_code == 401
        for _ in range(10):
            assert client.post(rx.url, content=body, headers={WEBHOOK_SIGNATURE_HEADER: WRONG_SIGNATURE}).status_code == 401
        rx.stop()  # the last line is written at shutdown
    elapsed = time.monotonic() - started
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deliveries refused")]
    assert lines[0] == "deliveries refused: 1 (1 no_signature) from 127.0.0.1; 1 since start"  # the first at once
    assert 2 <= len(lines) <= 2 + int(elapsed // CountLog("x", 0).interval), lines  # then one per interval
    counted = [re.fullmatch(r"deliveries refused: (\d+) \((\d+ \w+(, )?)+\) from 127\.0\.0\.1; \d+ since start", line)
               for line in lines]
    assert all(counted), lines
    assert sum(int(match.group(1)) for match in counted) == 50
    assert lines[-1].endswith("; 50 since start")


def test_a_signed_body_nested_two_hundred_thousand_levels_deep_is_400_not_500(make_receiver, client) -> None:
    rx = make_receiver()
    body = b'{"id": "wh_evt_deep", "event": "kol.updated", "created_at": "2026-11-22T10:00:00Z", "data": ' + \
        b"[" * 200_000 + b"]" * 200_000 + b"}"
    response = client.post(rx.url, content=body, headers=signed_headers(SECRET, body))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {"code": "invalid_envelope",
                                        "message": "the body nests arrays or objects too deeply to be read"}
    assert Inbox(rx.settings.inbox_path).counts()["total"] == 0


def test_an_unverified_bytes_cap_below_the_body_cap_is_one_line_naming_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("COMMOPS_WEBHOOK_UNVERIFIED_BYTES", "1000")
    with pytest.raises(ValueError) as refused:
        load_receiver_settings(max_body_bytes=2000)
    assert str(refused.value) == ("COMMOPS_WEBHOOK_UNVERIFIED_BYTES: must be at least the body cap (2000 bytes), "
                                  "or no body of that size could be received")
