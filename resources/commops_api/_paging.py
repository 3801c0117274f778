"""Paging a list endpoint completely: a `Walk` is one complete listing, proven or refused.

A pass fetches page 1 (which states the total), then pages 2..N concurrently with a bounded lookahead,
yielding each page as soon as every page before it has been yielded. Offset paging over a list that
changes can shift a row across a page boundary that was already read, so a pass only counts as complete
when it proves that nothing it could have missed changed:

- every page reported the same total T,
- the pass saw exactly T distinct ids, and
- no row it saw was created during the pass, judged on the SERVER's clock: the walk's start is the
  `Date` header of page 1 minus that request's duration and one second (Date has one-second precision),
  and a row counts as created meanwhile when its creation field (the walk's sort field) is at or after it.

Why that suffices: with R rows present throughout, A rows archived or deleted during the pass and C
created, the first page reports R + A and the last R + C, so equal totals give A = C; a row missed
among the R leaves fewer than T distinct ids unless seen rows that were not present throughout make up
for it: archived ones alone cannot (A = C), created ones are caught by the clock test. Nothing depends on
the client's clock agreeing with the server's, nor on the precision of the server's timestamps (the
comparison is inclusive). A server that sends no Date header (or rows without the field) cannot be judged
by time: there a pass is complete once a second pass with equal counts sees the same ids.

A pass that proves nothing is repaired by walking again, yielding only ids not yielded before, until a
pass is complete or the repair passes run out (IncompleteDataError naming the rows left unsettled).
When nothing changes, a walk makes exactly ceil(total / per_page) requests (at least one).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ._errors import ApiError, IncompleteDataError

ProgressCallback = Callable[[int, int], None]  # (pages done, pages expected so far)

# A row created just before a pass cannot be told from one created during it; before walking again,
# wait until the server's clock is this far past the newest such row, so the next pass can tell.
_SETTLE = timedelta(seconds=2)
_MAX_SETTLE_WAIT_SECONDS = 5.0
_SAMPLE = 5


@dataclass(frozen=True)
class Page:
    """One list page as received: its items, the meta it stated, and when it arrived."""

    number: int
    items: list[dict[str, Any]]
    total: int
    total_pages: int | None
    received_at: datetime  # the client's clock (UTC): orders observations made by this process
    server_date: datetime | None = None  # the response's Date header (the server's clock), when sent
    elapsed: float = 0.0  # seconds the request took, retries excluded

    @classmethod
    def from_body(cls, number: int, body: Any, endpoint: str, **received: Any) -> Page:
        meta = body.get("meta") if isinstance(body, dict) else None
        items = body.get("data") if isinstance(body, dict) else None
        if not isinstance(items, list) or not isinstance(meta, dict) or not isinstance(meta.get("total"), int):
            raise ApiError(f"{endpoint} page {number}: expected a list envelope with data and meta.total")
        total_pages = meta.get("total_pages")
        received.setdefault("received_at", datetime.now(UTC))
        return cls(number, items, meta["total"], total_pages if isinstance(total_pages, int) else None, **received)

    def page_count(self, per_page: int) -> int:
        """Pages of the pass: total_pages when the meta has it, else ceil(total / per_page); at least page 1."""
        if self.total_pages is not None:
            return max(self.total_pages, 1)
        return max(math.ceil(self.total / per_page), 1)

    def with_items(self, items: list[dict[str, Any]]) -> Page:
        return Page(self.number, items, self.total, self.total_pages, self.received_at, self.server_date, self.elapsed)


@dataclass
class PassResult:
    """What one pass over the pages saw, and whether that proves it complete."""

    totals: list[int]  # every distinct total the pages reported, in order of appearance
    ids: set[str]  # distinct ids seen
    created_meanwhile: list[str] | None  # ids created during the pass (server clock); None: cannot tell
    newest_created: datetime | None = None  # the latest creation time among created_meanwhile
    last_page: Page | None = None

    @property
    def total(self) -> int:
        return self.totals[-1]

    @property
    def counts_agree(self) -> bool:
        return len(self.totals) == 1 and len(self.ids) == self.total

    def describe(self) -> str:
        moved = "" if len(self.totals) == 1 else f" (the total moved: {' -> '.join(map(str, self.totals))})"
        created = ""
        if self.created_meanwhile:
            created = f", {len(self.created_meanwhile)} of them created while it paged"
        elif self.created_meanwhile is None:
            created = ", creation times not comparable (no Date header or no creation field)"
        return f"the API reports {self.total} items{moved} and the pass saw {len(self.ids)} distinct ids{created}"


def proves_complete(current: PassResult, previous: PassResult | None) -> bool:
    if not current.counts_agree:
        return False
    if current.created_meanwhile is not None:
        return not current.created_meanwhile
    return previous is not None and previous.counts_agree and previous.ids == current.ids


@dataclass
class Walk:
    """One complete listing of an endpoint. Iterate `pages()` (each id once, in page order, only pages
    with new ids); once exhausted, `total` is the API's verified total and `vanished_ids` the ids yielded
    by an earlier pass that the completing pass no longer found (archived or deleted meanwhile)."""

    fetch: Callable[[int], Page]
    endpoint: str
    per_page: int
    executor: Executor
    lookahead: int
    max_repair_passes: int
    log: Any
    created_field: str | None = None
    progress: ProgressCallback | None = None
    total: int | None = None
    vanished_ids: frozenset[str] = frozenset()
    repair_passes: int = 0
    _yielded: set[str] = field(default_factory=set)
    _pages_done: int = 0
    _pages_expected: int = 0

    def pages(self) -> Iterator[Page]:
        previous: PassResult | None = None
        result = yield from self._pass()
        while not proves_complete(result, previous):
            if self.repair_passes == self.max_repair_passes:
                raise self._unsettled(result)
            self.repair_passes += 1
            self.log.warning(
                f"{self.endpoint}: rows moved while paging ({result.describe()}); "
                f"repair pass {self.repair_passes}/{self.max_repair_passes} walks the pages again for missed ids"
            )
            self._let_server_clock_pass(result)
            previous = result
            result = yield from self._pass()
        self.vanished_ids = frozenset(self._yielded - result.ids)
        self.total = result.total

    def _pass(self) -> Iterator[Page]:
        ids: set[str] = set()
        first = self.fetch(1)
        since = _pass_start(first)
        created: list[str] | None = [] if since is not None and self.created_field else None
        newest: datetime | None = None
        count = first.page_count(self.per_page)
        self._pages_expected += count
        totals = [first.total]
        page = first
        for page in self._in_order(first, count):
            if page.total != totals[-1]:
                totals.append(page.total)
            fresh = self._note(page, ids)
            if created is not None:
                created, newest = _created_since(created, newest, page.items, self.created_field, since)
            if fresh:
                yield page.with_items(fresh)
            self._pages_done += 1
            if self.progress is not None:
                self.progress(self._pages_done, self._pages_expected)
        return PassResult(
            totals=list(dict.fromkeys(totals)), ids=ids, created_meanwhile=created, newest_created=newest, last_page=page
        )

    def _let_server_clock_pass(self, result: PassResult) -> None:
        """Wait (a few seconds at most) until the server's clock is past the rows this pass saw created,
        estimated from the last page's Date header plus the time elapsed since on this client."""
        last = result.last_page
        if result.newest_created is None or last is None or last.server_date is None:
            return
        server_now = last.server_date + (datetime.now(UTC) - last.received_at)
        delay = (result.newest_created + _SETTLE - server_now).total_seconds()
        if delay > 0:
            time.sleep(min(delay, _MAX_SETTLE_WAIT_SECONDS))

    def _in_order(self, first: Page, count: int) -> Iterator[Page]:
        """Page 1, then pages 2..count fetched concurrently, yielded in page order (bounded buffer)."""
        yield first
        pending: deque[Future[Page]] = deque()
        next_number = 2
        try:
            while pending or next_number <= count:
                while next_number <= count and len(pending) < max(self.lookahead, 1):
                    pending.append(self.executor.submit(self.fetch, next_number))
                    next_number += 1
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def _note(self, page: Page, ids: set[str]) -> list[dict[str, Any]]:
        """Record the page's ids in this pass; return the items no earlier page of the walk yielded."""
        fresh = []
        for item in page.items:
            item_id = item.get("id") if isinstance(item, dict) else None
            if not isinstance(item_id, str):
                raise ApiError(f"{self.endpoint} page {page.number}: an item has no string id")
            ids.add(item_id)
            if item_id not in self._yielded:
                self._yielded.add(item_id)
                fresh.append(item)
        return fresh

    def _unsettled(self, result: PassResult) -> IncompleteDataError:
        vanished = sorted(self._yielded - result.ids)
        unseen = max(result.total - len(result.ids), 0)
        parts = []
        if unseen:
            parts.append(f"{unseen} row(s) the API counts were never seen")
        if len(result.ids) > result.total:
            parts.append(f"{len(result.ids) - result.total} more id(s) seen than the API's final total (rows archived or deleted while paging)")
        if vanished:
            parts.append(f"{len(vanished)} row(s) seen earlier are gone from the last pass ({_sample(vanished)})")
        if result.created_meanwhile:
            parts.append(f"{len(result.created_meanwhile)} row(s) were created during it ({_sample(result.created_meanwhile)})")
        unsettled = "; ".join(parts) or "the pages disagree on the total"
        return IncompleteDataError(
            f"{self.endpoint}: incomplete after {self.repair_passes} repair passes: {result.describe()}; "
            f"unsettled: {unsettled}. Rows are changing faster than the sync can page: sync at a quieter time "
            "or raise max_repair_passes",
            endpoint=self.endpoint,
            expected=result.total,
            seen=len(result.ids),
            unsettled_ids=vanished + list(result.created_meanwhile or []),
        )


def _pass_start(first: Page) -> datetime | None:
    """A moment, on the server's clock, no later than page 1 was read (truncated to the second, so that
    second-precision creation times compare): its Date is the response's second, less the request time."""
    if first.server_date is None:
        return None
    earliest = first.server_date - timedelta(seconds=first.elapsed)
    return earliest.replace(microsecond=0) if earliest.microsecond else earliest


def _created_since(
    created: list[str], newest: datetime | None, items: list[dict[str, Any]], created_field: str, since: datetime
) -> tuple[list[str] | None, datetime | None]:
    """`created` plus the ids of items created at or after `since`, and the newest such creation time;
    None once an item has no readable creation time (the pass can then not be judged by time)."""
    for item in items:
        moment = _timestamp(item.get(created_field))
        if moment is None:
            return None, None
        if moment >= since:
            created.append(str(item.get("id")))
            newest = moment if newest is None else max(newest, moment)
    return created, newest


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _sample(ids: list[str]) -> str:
    more = f" and {len(ids) - _SAMPLE} more" if len(ids) > _SAMPLE else ""
    return ", ".join(ids[:_SAMPLE]) + more
