"""Per-organization request limits with a one-second window."""

from __future__ import annotations

import time

import httpx
import pytest

from service import admin
from service.ratelimit import RateLimiter
from service.server import ServiceServer
from service.settings import ServiceSettings
from tests.service.conftest import bearer, error_of


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    db = tmp_path_factory.mktemp("limits") / "service.db"
    starter = admin.create_org(db, "Starter Co", "starter")
    pro = admin.create_org(db, "Pro Co", "professional")
    keys = {"starter": admin.create_key(db, starter, "all"), "professional": admin.create_key(db, pro, "all")}
    with ServiceServer(ServiceSettings(db=db, rate_window_seconds=1)) as running:
        yield running, keys


def burst_until_429(client: httpx.Client, limit: int) -> tuple[httpx.Response, list[httpx.Response]]:
    responses: list[httpx.Response] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = client.get("/products")
        responses.append(response)
        if response.status_code == 429:
            return response, responses
        assert len(responses) < limit * 20, "never rate limited"
    raise AssertionError("no 429 before the deadline")


def test_headers_count_down_within_a_window(limited):
    server, keys = limited
    with httpx.Client(base_url=server.base_url, headers=bearer(keys["professional"])) as client:
        first = client.get("/products")
        second = client.get("/products")
    assert first.headers["x-ratelimit-limit"] == "300"
    if first.headers["x-ratelimit-reset"] == second.headers["x-ratelimit-reset"]:
        assert int(second.headers["x-ratelimit-remaining"]) == int(first.headers["x-ratelimit-remaining"]) - 1
    reset = int(first.headers["x-ratelimit-reset"])
    assert time.time() - 1 <= reset <= time.time() + 2  # epoch seconds of the 1 s window's end


def test_exceeding_the_plan_rate_is_429_with_retry_after_and_recovers_after_reset(limited):
    server, keys = limited
    with httpx.Client(base_url=server.base_url, headers=bearer(keys["starter"])) as client:
        rejected, responses = burst_until_429(client, 60)
        details = error_of(rejected, 429, "rate_limited")
        assert details["limit"] == 60
        assert int(rejected.headers["retry-after"]) >= 1
        assert rejected.headers["x-ratelimit-remaining"] == "0"
        window = rejected.headers["x-ratelimit-reset"]
        accepted_in_window = [r for r in responses if r.status_code == 200 and r.headers["x-ratelimit-reset"] == window]
        assert len(accepted_in_window) == 60
        # another organization has its own counter
        other = httpx.get(f"{server.base_url}/products", headers=bearer(keys["professional"]))
        assert other.status_code == 200
        deadline = time.monotonic() + 5
        while time.time() < int(window) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/products").status_code == 200


def test_error_responses_carry_the_headers_too(limited):
    server, keys = limited
    for response in (httpx.get(f"{server.base_url}/kols/kol_missing", headers=bearer(keys["professional"])),
                     httpx.get(f"{server.base_url}/products", params={"page": "0"},
                               headers=bearer(keys["professional"])),
                     httpx.get(f"{server.base_url}/products")):
        assert response.status_code in (400, 401, 404)
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(response.headers)


class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_day_limit_applies_after_the_minute_resets():
    clock = FakeClock(1_000_000.0)
    limiter = RateLimiter(minute_seconds=60, day_seconds=86_400, clock=clock)
    for minute in range(167):  # 60 per minute; 10,000 per day
        clock.now = 86_400 * 12 + minute * 60
        for _ in range(60):
            if not limiter.hit("org", "starter").allowed:
                break
    clock.now += 60
    decision = limiter.hit("org", "starter")
    assert not decision.allowed and decision.remaining == 0
    assert decision.retry_after > 60  # until the day window ends, not the minute


def test_disabled_limits_never_reject_and_never_report_an_exhausted_window():
    limiter = RateLimiter(minute_seconds=60, day_seconds=86_400, enforce=False, clock=FakeClock(0.0))
    decisions = [limiter.hit("org", "starter") for _ in range(100)]
    assert all(d.allowed for d in decisions) and decisions[-1].remaining == 60


def test_enterprise_has_no_day_limit():
    clock = FakeClock(0.0)
    limiter = RateLimiter(minute_seconds=60, day_seconds=86_400, clock=clock)
    for minute in range(200):  # 200,000 requests in one day
        clock.now = minute * 60.0
        assert all(limiter.hit("org", "enterprise").allowed for _ in range(1_000))


def test_a_revoked_key_never_spends_its_organizations_budget(tmp_path):
    """The issue's case: 65 requests with a revoked key left the valid keys on 429 for a minute."""
    db = tmp_path / "service.db"
    org = admin.create_org(db, "Leaky Co", "starter")
    valid = admin.create_key(db, org, "all")
    revoked = admin.create_key(db, org, "all")
    admin.revoke_key(db, admin.list_keys(db)[-1]["id"])
    # a 60 s window, so that the whole burst falls into one or two windows
    with ServiceServer(ServiceSettings(db=db, rate_window_seconds=60)) as server:
        with httpx.Client(base_url=server.base_url, headers=bearer(revoked)) as client:
            answers = [client.get("/products") for _ in range(65)]
        statuses = [answer.status_code for answer in answers]
        assert set(statuses) <= {401, 429}
        windows = {answer.headers["x-ratelimit-reset"] for answer in answers}
        assert 429 in statuses or len(windows) > 1  # its own bucket ran out (unless a minute began mid-burst)
        assert all(answer.json()["error"]["code"] == "unauthorized" for answer in answers[:60] if
                   answer.status_code == 401)
        ok = httpx.get(f"{server.base_url}/products", headers=bearer(valid))
        assert ok.status_code == 200, ok.text
        assert int(ok.headers["x-ratelimit-remaining"]) == 59  # only this request was counted
        assert ok.headers["x-ratelimit-limit"] == "60"


def test_failed_authentication_beyond_its_address_budget_is_429_with_retry_after(tmp_path):
    db = tmp_path / "service.db"
    with ServiceServer(ServiceSettings(db=db, rate_window_seconds=60)) as server:
        with httpx.Client(base_url=server.base_url, headers=bearer("cos_unknown")) as client:
            answers = [client.get("/kols") for _ in range(61)]
    first, last = answers[0], answers[-1]
    error_of(first, 401, "unauthorized")
    assert first.headers["x-ratelimit-limit"] == "60"
    assert int(first.headers["x-ratelimit-remaining"]) < 60
    if last.status_code == 429:  # unless a minute boundary fell inside the burst
        error_of(last, 429, "rate_limited")
        assert int(last.headers["retry-after"]) >= 1 and last.headers["x-ratelimit-remaining"] == "0"
    assert 429 in {answer.status_code for answer in answers} or any(
        a.headers["x-ratelimit-reset"] != first.headers["x-ratelimit-reset"] for a in answers)


# A window far longer than the test: no window boundary falls between exhausting a bucket and the next request.
LONG_WINDOW = 10**9


def exhaust_the_unauthenticated_budget(base_url: str, forwarded_for: str) -> None:
    with httpx.Client(base_url=base_url, headers={"X-Forwarded-For": forwarded_for}) as client:
        rejected, _ = burst_until_429(client, 60)
    error_of(rejected, 429, "rate_limited")


def test_a_local_client_cannot_pick_its_rate_limit_bucket_with_x_forwarded_for(tmp_path):
    """By default no peer is a trusted proxy, 127.0.0.1 included (uvicorn's own default trusts it)."""
    settings = ServiceSettings(db=tmp_path / "service.db", rate_window_seconds=LONG_WINDOW)
    with ServiceServer(settings) as server:
        exhaust_the_unauthenticated_budget(server.base_url, "203.0.113.9")
        another = httpx.get(f"{server.base_url}/products", headers={"X-Forwarded-For": "198.51.100.7"})
    error_of(another, 429, "rate_limited")  # the same bucket: the connection's own address


def test_x_forwarded_for_from_a_named_proxy_picks_the_clients_bucket(tmp_path):
    settings = ServiceSettings(db=tmp_path / "service.db", rate_window_seconds=LONG_WINDOW,
                               forwarded_allow_ips="127.0.0.1")
    with ServiceServer(settings) as server:
        exhaust_the_unauthenticated_budget(server.base_url, "203.0.113.9")
        another = httpx.get(f"{server.base_url}/products", headers={"X-Forwarded-For": "198.51.100.7"})
        again = httpx.get(f"{server.base_url}/products", headers={"X-Forwarded-For": "203.0.113.9"})
    error_of(another, 401, "unauthorized")  # a client of its own behind the proxy
    error_of(again, 429, "rate_limited")
