"""The API client pages every list endpoint completely, with exactly one request per page."""

from __future__ import annotations

import logging
import math
import random
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from resources.commops_api._paging import Page
from tests.waiting import wait_until

from .test_api_client_support import (
    ACTIVE,
    ARCHIVED,
    active_kol_ids,
    add_kols,
    archive_kols,
    client_for,
    collect,
    kol_listing,
    swap_kols,
    table_ids,
    walk_ids,
)


@pytest.mark.parametrize("rows", [0, 1, 100, 101, 1000])
def test_a_walk_sends_one_request_per_page_and_none_for_an_empty_page(make_service, rows):
    service = make_service(signals=rows)
    add_kols(service, rows, hours_ago=1)
    expected_requests = max(1, math.ceil(rows / 100))

    with client_for(service) as client:
        kol_ids, walk = walk_ids(client, "/kols")  # meta has total_pages
        assert client.stats.requests == expected_requests
        assert walk.total == rows and walk.report.lists[0].passes == 1 and walk.report.complete

        signal_ids = collect(client, "/signals", sort="fetched_at")  # meta lacks total_pages
        assert client.stats.requests == 2 * expected_requests

    assert len(kol_ids) == len(set(kol_ids)) == rows
    assert set(kol_ids) == active_kol_ids(service)
    assert len(signal_ids) == len(set(signal_ids)) == rows
    assert set(signal_ids) == table_ids(service, "signals")


def test_a_walk_yields_pages_in_sort_order_with_raw_items_and_their_receipt_time(make_service):
    service = make_service()
    created = add_kols(service, 250, hours_ago=1)
    with client_for(service, max_concurrency=4) as client:
        started = datetime.now(UTC)
        pages = list(client.walk("/kols").pages())
        finished = datetime.now(UTC)
    assert [len(page.items) for page in pages] == [100, 100, 50]
    assert [item["id"] for page in pages for item in page.items] == created  # created_at asc, as created
    assert {"id", "full_name", "specialties", "tier", "created_at", "updated_at"} <= pages[0].items[0].keys()
    # Pages arrive concurrently, so in any order; each carries when it arrived and the server's Date.
    assert all(started <= p.received_at <= finished and p.server_date is not None for p in pages)


def test_a_walk_yields_exactly_the_service_ids_under_fault_injection(make_service):
    service = make_service(
        fault_seed=7,
        fault_500_rate=0.08,
        fault_503_rate=0.08,
        fault_429_rate=0.03,
        fault_slow_rate=0.08,
        fault_slow_seconds=0.2,
        fault_drop_rate=0.08,
        fault_truncate_rate=0.08,
    )
    add_kols(service, 1500, hours_ago=1)
    with client_for(service, max_concurrency=4, max_retries=10) as client:
        ids = collect(client, "/kols")
        stats = client.stats
    assert len(ids) == len(set(ids))
    assert set(ids) == active_kol_ids(service)
    assert stats.retries > 0  # the faults really happened, and were retried
    assert stats.requests > stats.pages


def test_requests_that_time_out_are_retried(make_service):
    service = make_service(fault_seed=3, fault_slow_rate=0.4, fault_slow_seconds=1.5)
    add_kols(service, 500, hours_ago=1)
    with client_for(service, timeout=0.5, max_retries=10) as client:
        ids = collect(client, "/kols")
        assert client.stats.retries > 0
    assert set(ids) == active_kol_ids(service)


def test_a_listing_is_exact_when_rows_are_created_and_archived_while_paging(make_service):
    # Every request is slowed, so the walk is still fetching pages when the data changes under it.
    service = make_service(fault_slow_rate=1.0, fault_slow_seconds=0.03)
    original = add_kols(service, 1200, hours_ago=1)
    archived_early = original[10:15] + original[150:153]  # rows on pages already fetched: later rows shift back
    changes = {3: lambda: (archive_kols(service, archived_early), add_kols(service, 4)),
               8: lambda: (archive_kols(service, original[700:702]), add_kols(service, 2))}

    def mutate_at(pages_done, _pages_expected):
        if pages_done in changes:
            changes.pop(pages_done)()  # runs while the worker threads keep fetching pages

    with client_for(service, max_concurrency=2) as client:
        ids, listing = kol_listing(client, progress=mutate_at)
    current = active_kol_ids(service)
    report = listing.report
    assert not changes, "the data changed while paging"
    assert report.complete and report.lists[0].passes >= 2  # the shifts were noticed and repaired
    assert len(ids[ACTIVE]) == len(set(ids[ACTIVE])), "an id was yielded twice"
    assert current <= set(ids[ACTIVE]), f"{len(current - set(ids[ACTIVE]))} active KOLs were lost"
    assert set(archived_early + original[700:702]) <= set(ids[ARCHIVED]) | set(ids[ACTIVE])
    assert set(report.moved) <= set(archived_early + original[700:702])


def test_a_listing_is_exact_when_a_creation_offsets_an_archive_in_the_total(make_service):
    service = make_service(fault_slow_rate=1.0, fault_slow_seconds=0.03)
    original = add_kols(service, 1000, hours_ago=1)
    changes = {2: lambda: swap_kols(service, original[20:23], 3)}  # total stays 1000 on every page

    def mutate_at(pages_done, _pages_expected):
        if pages_done in changes:
            changes.pop(pages_done)()

    with client_for(service, max_concurrency=2) as client:
        ids, listing = kol_listing(client, progress=mutate_at)
    assert not changes
    assert listing.report.complete and listing.report.lists[0].passes >= 2
    assert listing.report.lists[0].final_total == 1000
    assert active_kol_ids(service) <= set(ids[ACTIVE])


def test_a_listing_that_may_not_repair_says_it_is_not_proven_and_counts_what_it_lacks(make_service):
    service = make_service(fault_slow_rate=1.0, fault_slow_seconds=0.03)
    original = add_kols(service, 1000, hours_ago=1)
    changes = {2: lambda: archive_kols(service, original[5:10])}  # rows on page 1 (read): five later rows shift onto it

    def mutate_at(pages_done, _pages_expected):
        if pages_done in changes:
            changes.pop(pages_done)()

    with client_for(service, max_concurrency=2, max_repair_passes=0) as client:
        ids, listing = kol_listing(client, progress=mutate_at)
    report = listing.report
    assert not report.complete
    active = report.lists[0]
    assert (active.complete, active.final_total, active.unseen) == (False, 995, 5)
    assert "kols is_archived" not in report.describe()  # labels are the caller's
    assert report.describe().startswith("/kols: active: 990 rows, the API counts 995, 1 pass(es), NOT proven complete")
    assert "5 counted by the API and not accounted for: rows present throughout may be among them" in report.describe()


def test_a_walk_pages_without_sort_when_the_server_rejects_the_sort_parameter(make_service, caplog):
    service = make_service()
    created = add_kols(service, 150, hours_ago=1)
    caplog.set_level(logging.WARNING, logger="commops.api")
    with client_for(service) as client:
        first = collect(client, "/kols", sort="bogus")
        second = collect(client, "/kols", sort="bogus")
        # 1 rejected request, then 2 pages per walk: the rejection is remembered
        assert client.stats.requests == 1 + 2 + 2
    assert sorted(first) == sorted(second) == sorted(created)
    rejections = [r for r in caplog.records if "rejected sort=bogus" in r.getMessage()]
    assert len(rejections) == 1


def test_a_walk_keeps_fetching_while_its_reader_is_busy(make_service):
    """The reader of a walk pauses now and then (the sync writes a row group of 10,000 rows, tens of
    milliseconds); the fetch threads go on meanwhile, 8 pages each ahead of it, so a busy reader does
    not leave the server idle."""
    service = make_service(signals=4_000)
    with client_for(service, max_concurrency=4) as client:
        pages = client.walk("/signals", sort="fetched_at").pages()
        first, second = next(pages), next(pages)  # page 1 alone, then the body's first page: held here
        ahead = 4 * 8
        wait_until(lambda: client.stats.requests >= 1 + ahead, timeout=30,
                   what=f"{ahead} body pages requested while the reader holds the first")
        rest = list(pages)
    ids = [item["id"] for page in (first, second, *rest) for item in page.items]
    assert len(ids) == len(set(ids)) == 4_000
    assert client.stats.requests == 40


def test_get_many_fetches_detail_objects_concurrently(make_service):
    service = make_service()
    ids = add_kols(service, 30, hours_ago=1)
    with client_for(service, max_concurrency=4) as client:
        details = dict(client.get_many([f"/kols/{i}" for i in ids] + ["/kols/kol_doesnotexist"],
                                       {"include": "events,campaigns"}, skip_missing=True))
        assert client.stats.requests == 31
    assert set(details) == {f"/kols/{i}" for i in ids}
    assert all({"contact", "metrics", "events", "campaigns"} <= d.keys() for d in details.values())


def test_a_decoded_page_is_judged_sorted_or_not_exactly_as_its_items_read_one_by_one():
    """The listing proves a list by the key ranges of sorted pages; a decoded page's keys are read in
    Arrow, and must give the verdict and the range the row-by-row reading gives, ties broken by id."""
    rng = random.Random(7)
    moments = [datetime(2026, 1, 1, tzinfo=UTC).replace(minute=m) for m in range(4)]  # few: many ties
    for _ in range(300):
        rows = sorted((rng.choice(moments), f"id-{rng.randrange(50):02d}") for _ in range(rng.randrange(1, 8)))
        if rng.random() < 0.5:
            rng.shuffle(rows)
        batch = pa.RecordBatch.from_pydict({"id": [i for _, i in rows], "updated_at": [m for m, _ in rows]},
                                           schema=pa.schema([("id", pa.string()), ("updated_at", pa.timestamp("us", "UTC"))]))
        page = Page.from_decoded(1, batch, {"total": len(rows)}, "/kols")
        ascending, first, last = page.decoded_sort_keys("updated_at", page.ids())
        keys = list(zip(page.sort_values("updated_at"), page.ids()))
        assert ascending == all(a <= b for a, b in zip(keys, keys[1:])), keys
        assert (first, last) == (keys[0], keys[-1])
