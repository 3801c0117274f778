"""Who may drive the review page, over HTTP (no browser): the launch token, sign-in beyond loopback, the Host
check, CSRF on every form, the security headers; and `commops review` refusing to serve beyond loopback
without a password."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from crm.report import reports_dir
from crm.review_page.access import COOKIE, CSP, SIGN_IN_LIMIT, SIGN_IN_WINDOW
from crm.review_page.server import ReviewServer, page_config
from crm.review_page.settings import ReviewSettings, local_user
from http_serving.sockets import free_port
from resources.files import link_over
from tests.processes import wait_for_url


def serve(tmp_path, **settings) -> ReviewServer:
    return ReviewServer(page_config("127.0.0.1", tmp_path, settings=ReviewSettings(**settings))).start()


@pytest.fixture
def page(tmp_path) -> Iterator[ReviewServer]:
    server = serve(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def signing_in(tmp_path) -> Iterator[ReviewServer]:
    server = serve(tmp_path, password="s3cret-admin", users="maria=pw-of-maria")
    yield server
    server.stop()


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_the_launch_token_opens_a_strict_http_only_session_and_nothing_else_does(page):
    with httpx.Client(base_url=page.url) as client:
        assert client.get("/").status_code == 401
        assert client.get("/login?token=not-the-token").status_code == 401
        opened = client.get("/login", params={"token": page.config.access.token})
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        home = client.get("/")
        assert home.status_code == 200 and "run `commops sync`" in home.text  # an empty data directory
        assert local_user() in home.text


def test_a_host_header_naming_another_site_is_refused(page):
    token = page.config.access.token
    rebound = httpx.get(f"{page.url}/login?token={token}", headers={"host": f"evil.example:{page.port}"})
    assert rebound.status_code == 421 and "set-cookie" not in rebound.headers
    for host in (f"127.0.0.1:{page.port}", f"localhost:{page.port}"):
        assert httpx.get(f"{page.url}/login?token={token}", headers={"host": host}).status_code == 303


def test_every_answer_carries_the_security_headers(page):
    for path in ("/", "/login", "/static/review.css", "/nowhere"):
        headers = httpx.get(page.url + path).headers
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP


def test_a_post_without_the_sessions_csrf_token_gets_403(page):
    with httpx.Client(base_url=page.url) as client:
        client.get("/login", params={"token": page.config.access.token})
        assert client.post("/logout", data={}).status_code == 403
        assert client.post("/logout", data={"csrf": "x" * 43}).status_code == 403
        assert client.get("/").status_code == 200  # still signed in: the forged sign-out did nothing
        assert httpx.post(page.url + "/logout", data={}).status_code == 403  # no session at all


def test_users_sign_in_by_name_and_password_where_a_password_is_set(signing_in):
    with httpx.Client(base_url=signing_in.url) as client:
        assert client.get("/").headers["location"] == "/login"
        assert client.get("/login", params={"token": signing_in.config.access.token}).status_code == 200  # no token here
        form = client.get("/login")
        assert client.post("/login", data={"user": "maria", "password": "pw-of-maria"}).status_code == 403  # no CSRF
        wrong = client.post("/login", data={"csrf": csrf_of(form.text), "user": "maria", "password": "s3cret-admin"})
        assert wrong.status_code == 401 and "Wrong name or password" in wrong.text
        signed = client.post("/login", data={"csrf": csrf_of(wrong.text), "user": "maria", "password": "pw-of-maria"})
        assert signed.status_code == 303 and signed.cookies[COOKIE] != form.cookies[COOKIE]  # a new session id
        assert "maria" in client.get("/").text


def test_password_guessing_is_refused_unchecked_past_the_limit_from_that_address_and_for_that_name(signing_in):
    def attempt(client: httpx.Client, user: str, password: str) -> httpx.Response:
        form = client.get("/login")
        return client.post("/login", data={"csrf": csrf_of(form.text), "user": user, "password": password})

    with httpx.Client(base_url=signing_in.url) as guesser:
        for n in range(SIGN_IN_LIMIT):
            assert attempt(guesser, "admin", f"guess-{n}").status_code == 401
        locked = attempt(guesser, "admin", "s3cret-admin")  # the right password, no longer checked
        assert locked.status_code == 429 and "Too many failed sign-ins: try again in 15 minutes" in locked.text
        assert 0 < int(locked.headers["retry-after"]) <= SIGN_IN_WINDOW
        assert attempt(guesser, "maria", "pw-of-maria").status_code == 429  # this address, whatever the name
        assert guesser.get("/").headers["location"] == "/login"  # signed in as nobody
    with httpx.Client(base_url=signing_in.url, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
        assert attempt(other, "admin", "s3cret-admin").status_code == 429  # this name, from any address
        for _ in range(SIGN_IN_LIMIT - 1):
            assert attempt(other, "maria", "wrong").status_code == 401
        assert attempt(other, "maria", "pw-of-maria").status_code == 303  # a success forgets the failures
        assert "maria" in other.get("/").text
        for _ in range(SIGN_IN_LIMIT - 1):  # counted afresh: without the success, the second would be refused
            assert attempt(other, "maria", "wrong").status_code == 401


def test_behind_a_named_proxy_sign_in_failures_count_for_the_client_it_forwards_and_no_one_else_can_name_one(tmp_path):
    """`commops review` with COMMOPS_REVIEW_FORWARDED_ALLOW_IPS: a guesser behind the proxy locks out their own
    address, not every user of the proxy; a peer that is not the proxy cannot pick the address it is counted as.
    A value that is not an address fails in one line."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMMOPS_REVIEW_")},
           "COMMOPS_REVIEW_PASSWORD": "s3cret-admin", "COMMOPS_REVIEW_USERS": "maria=pw-of-maria"}
    command = [sys.executable, "-m", "commops_cli", "review", "--data-dir", str(tmp_path / "data")]
    bad = subprocess.run([*command, "--port", "0"], env={**env, "COMMOPS_REVIEW_FORWARDED_ALLOW_IPS": "proxy.internal"},
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stderr == ("commops review failed: COMMOPS_REVIEW_FORWARDED_ALLOW_IPS: "
                                                  "'proxy.internal' is not an IP address or network (e.g. 10.0.0.5,10.1.0.0/16)\n")

    def attempt(client: httpx.Client, client_address: str, user: str, password: str) -> int:
        forwarded = {"X-Forwarded-For": client_address}
        form = client.get("/login", headers=forwarded)
        return client.post("/login", headers=forwarded,
                           data={"csrf": csrf_of(form.text), "user": user, "password": password}).status_code

    port = free_port()
    log = tmp_path / "review.log"
    with log.open("w") as out:  # the proxy is this machine's 127.0.0.1; 127.0.0.2 is a peer that is not it
        process = subprocess.Popen([*command, "--port", str(port)], env={**env, "COMMOPS_REVIEW_FORWARDED_ALLOW_IPS": "127.0.0.1"},
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_url(process, url + "/static/review.css", 60, log, interval=0.1)
        with httpx.Client(base_url=url) as proxy:
            for n in range(SIGN_IN_LIMIT):
                assert attempt(proxy, "203.0.113.7", "admin", f"guess-{n}") == 401
            assert attempt(proxy, "203.0.113.7", "maria", "pw-of-maria") == 429  # the guesser's address
            assert attempt(proxy, "198.51.100.2", "maria", "pw-of-maria") == 303  # another user behind the proxy
            served_over_https = proxy.get("/login", headers={"X-Forwarded-For": "198.51.100.3", "X-Forwarded-Proto": "https"})
            assert "; secure" in served_over_https.headers["set-cookie"].lower()  # never sent back over plain HTTP
            assert "; secure" not in proxy.get("/login").headers["set-cookie"].lower()
        with httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as peer:
            for n in range(SIGN_IN_LIMIT):  # each time another address it claims: all counted as 127.0.0.2
                assert attempt(peer, f"192.0.2.{n}", f"nobody{n}", "wrong") == 401
            assert attempt(peer, "192.0.2.200", "maria", "pw-of-maria") == 429
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_commops_review_refuses_to_serve_beyond_loopback_without_a_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMOPS_REVIEW_")}
    refused = subprocess.run([sys.executable, "-m", "commops_cli", "review", "--host", "0.0.0.0", "--port", "0",
                              "--data-dir", str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("commops review failed: bound to 0.0.0.0, beyond loopback, the page needs sign-in: "
                                     "set COMMOPS_REVIEW_PASSWORD")
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_commops_review_rejects_a_malformed_user_list_in_one_line(tmp_path):
    env = {**os.environ, "COMMOPS_REVIEW_USERS": "maria"}
    refused = subprocess.run([sys.executable, "-m", "commops_cli", "review", "--port", "0", "--data-dir", str(tmp_path)],
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "COMMOPS_REVIEW_USERS: each item is name=password" in refused.stderr


def test_a_download_gets_the_file_it_started_whole_when_a_night_replaces_it_meanwhile(page, tmp_path):
    reports = reports_dir(tmp_path, "default")
    reports.mkdir(parents=True)
    night = [reports / "reconciliation-1.csv", reports / "reconciliation-2.csv"]
    for n, path in enumerate(night):  # larger than the sockets' buffers: the page is still reading when it changes
        path.write_bytes(b"".join(b"row %d of night %d\r\n" % (i, n) for i in range(1_000_000)))
    link_over(night[0], reports / "latest.csv")
    with httpx.Client(base_url=page.url) as client:
        client.get("/login", params={"token": page.config.access.token})
        assert client.get("/o/default/files/nothing.csv").status_code == 404
        with client.stream("GET", "/o/default/files/reconciliation.csv") as download:
            assert download.status_code == 200
            assert download.headers["content-disposition"] == 'attachment; filename="default-reconciliation.csv"'
            chunks = download.iter_bytes()
            received = next(chunks)
            link_over(night[1], reports / "latest.csv")  # the next night's report, as write_reports puts it
            received += b"".join(chunks)
        assert int(download.headers["content-length"]) == len(received)
        assert received == night[0].read_bytes()
        assert client.get("/o/default/files/reconciliation.csv").content == night[1].read_bytes()
