"""The API client shares one rate budget across a run, paces itself from the headers, and obeys 429s."""

from __future__ import annotations

import math
import time

import pytest

from resources.commops_api import RequestBudgetExceeded
from resources.commops_api._rate import RateBudget

from .test_api_client_support import active_kol_ids, add_kols, client_for, collect


def test_paging_under_a_one_second_window_meets_no_429(make_service):
    # starter plan: 60 requests per (1 s) window; 10 items per page -> ~150 requests, 3 windows at least
    service = make_service(plan="starter", rate_limits_enabled=True, rate_window_seconds=1)
    add_kols(service, 1500, hours_ago=1)
    with client_for(service, per_page=10, max_concurrency=4) as client:
        started = time.monotonic()
        kol_ids = collect(client, "/kols")
        elapsed = time.monotonic() - started
        stats = client.stats
    assert set(kol_ids) == active_kol_ids(service)
    assert stats.requests == 150
    assert stats.rate_limited == 0
    assert stats.throttled_seconds > 0  # it did wait for windows to reset rather than hammering on
    assert elapsed >= 1.0  # 150 requests cannot fit in fewer than three windows


def test_one_budget_is_shared_by_every_endpoint_of_a_run(make_service):
    service = make_service(plan="starter", rate_limits_enabled=True, rate_window_seconds=1, signals=300)
    add_kols(service, 600, hours_ago=1)
    with client_for(service, per_page=10, max_concurrency=4) as client:
        kol_ids = collect(client, "/kols")
        signal_ids = collect(client, "/signals", sort="fetched_at")
        details = list(client.get_many([f"/kols/{i}" for i in kol_ids[:30]]))
        stats = client.stats
    assert (len(kol_ids), len(signal_ids), len(details)) == (600, 300, 30)
    assert stats.requests == 60 + 30 + 30
    assert stats.rate_limited == 0


def test_a_429_pauses_requests_for_retry_after_then_resumes(make_service):
    service = make_service(fault_seed=11, fault_429_rate=0.25)
    add_kols(service, 800, hours_ago=1)
    with client_for(service, max_concurrency=4) as client:
        kol_ids = collect(client, "/kols")
        stats = client.stats
    assert set(kol_ids) == active_kol_ids(service)
    assert stats.rate_limited > 0
    assert stats.requests == stats.pages + stats.rate_limited
    assert stats.throttled_seconds >= 0.9 * stats.rate_limited  # Retry-After: 1


def test_the_request_cap_stops_the_run_naming_the_setting(make_service):
    service = make_service()
    add_kols(service, 500, hours_ago=1)
    with client_for(service, max_requests=3) as client:
        with pytest.raises(RequestBudgetExceeded, match="max_requests_per_run") as raised:
            collect(client, "/kols")
        assert client.stats.requests == 3
    assert "3" in str(raised.value)


@pytest.mark.parametrize("reset_style", ["epoch seconds", "seconds until reset"])
def test_an_exhausted_window_waits_for_the_reset_in_either_reset_style(reset_style):
    # The local service sends epoch seconds; other servers may send a delta: both must pace.
    budget = RateBudget(max_requests=10)
    budget.acquire()
    reset = str(math.ceil(time.time()) + 1) if reset_style == "epoch seconds" else "1"
    budget.release({"x-ratelimit-limit": "5", "x-ratelimit-remaining": "0", "x-ratelimit-reset": reset})
    started = time.monotonic()
    budget.acquire()  # the window is used up: this waits for the reset
    waited = time.monotonic() - started
    assert 0.95 < waited < 2.2
    assert budget.throttled_seconds == pytest.approx(waited, abs=0.05)
    budget.release(None)
