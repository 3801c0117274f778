"""Sizes the spec leaves open, refused the safe way: bodies above the cap (413 while
reading, the rest never buffered, drained up to twice the cap so every client reads the 413),
arrays above their item limits, too many variables."""

from __future__ import annotations

import json
import select
import socket
import time
from urllib.parse import urlsplit

import pytest

from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store.campaigns import MAX_VARIABLES
from tests.python_clients import CLIENTS, post_with
from tests.service.conftest import error_of
from tests.service.test_input_characters import EMAIL, campaign


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        (campaign(audience={"kol_ids": [f"kol_{i}" for i in range(10_001)]}), "audience.kol_ids", 10_000),
        (campaign(audience={"external_contacts": [f"p{i}@x.example" for i in range(10_001)]}),
         "audience.external_contacts", 10_000),
        (campaign(products=[f"prod_{i}" for i in range(101)]), "products", 100),
    ],
)
def test_arrays_above_their_item_limit_are_400_too_long_with_the_limit(api, body, field, limit):
    details = error_of(api.post("/campaigns", json=body), 400, "invalid_request")
    assert details == {"field": field, "reason": "too_long", "max_length": limit}


def test_too_many_personalization_variables_are_400(api):
    html = "<p>" + "{{first_name}} " * (MAX_VARIABLES + 1) + "</p>"
    details = error_of(api.post("/campaigns", json=campaign(email={**EMAIL, "body_html": html})), 400,
                       "invalid_request")
    assert details == {"field": "email.body_html", "reason": "too_many_variables", "limit": MAX_VARIABLES}


# ---- body size: raw sockets, because an HTTP client sends the whole body before it reads the answer


def _request_head(base_url: str, key: str, path: str, extra: str) -> bytes:
    url = urlsplit(base_url)
    return (f"POST {url.path}{path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


def _read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], dict]:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_declared_body_above_the_cap_is_413_before_any_of_it_is_sent(server, dataset):
    """The issue's 300 MiB body: answered from Content-Length alone."""
    host, port = urlsplit(server.base_url).hostname, urlsplit(server.base_url).port
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(_request_head(server.base_url, dataset.key, "/kols", f"Content-Length: {300 * 1024 * 1024}\r\n"))
        status, headers, body = _read_response(sock)
    assert status == 413
    assert body["error"]["code"] == "payload_too_large"
    assert body["error"]["details"] == {"limit_bytes": ServiceSettings().max_body_bytes}
    assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(headers)


@pytest.fixture(scope="module")
def small_cap_server(dataset):
    settings = ServiceSettings(db=dataset.db, rate_limits_enabled=False, webhook_worker_enabled=False,
                               max_body_bytes=64 * 1024)
    with ServiceServer(settings) as running:
        yield running


def test_a_streamed_body_is_refused_with_413_once_it_passes_the_cap_and_the_rest_is_not_read(
        small_cap_server, dataset):
    """Chunked, without Content-Length: the server answers while the client is still sending."""
    url = urlsplit(small_cap_server.base_url)
    chunk = b"x" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    offered = 300 * 1024 * 1024
    sent = 0
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(_request_head(small_cap_server.base_url, dataset.key, "/kols", "Transfer-Encoding: chunked\r\n"))
        deadline = time.monotonic() + 30
        while sent < offered and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:
                break
            if writable:
                try:
                    sent += sock.send(frame)
                except (BrokenPipeError, ConnectionResetError):
                    break
        status, _, body = _read_response(sock)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert body["error"]["details"] == {"limit_bytes": 64 * 1024}
    assert sent < 32 * 1024 * 1024, f"{sent:,} bytes were accepted before the refusal"


@pytest.fixture(scope="module")
def two_mib_cap_server(dataset):
    settings = ServiceSettings(db=dataset.db, rate_limits_enabled=False, webhook_worker_enabled=False,
                               max_body_bytes=2 * 1024 * 1024)
    with ServiceServer(settings) as running:
        yield running


@pytest.mark.parametrize("client", CLIENTS)
def test_a_python_client_sending_a_body_over_the_cap_reads_the_413(two_mib_cap_server, dataset, client):
    """4 MB, more than the sockets buffer: undrained, the connection resets under the client's send."""
    body = json.dumps({"full_name": "Too Large", "bio": "b" * 4_000_000}).encode()
    headers = {"Authorization": f"Bearer {dataset.key}", "Content-Type": "application/json"}
    status, answer = post_with(client, f"{two_mib_cap_server.base_url}/kols", body, headers)
    assert status == 413
    assert answer["error"]["code"] == "payload_too_large"
    assert answer["error"]["details"] == {"limit_bytes": 2 * 1024 * 1024}


def test_a_body_under_the_cap_is_read_normally(small_cap_server, dataset, unique_email):
    import httpx

    response = httpx.post(f"{small_cap_server.base_url}/kols", headers={"Authorization": f"Bearer {dataset.key}"},
                          json={"full_name": "Small Body", "specialties": ["cardiology"], "email": unique_email,
                                "bio": "b" * 9_000})
    assert response.status_code == 201, response.text
