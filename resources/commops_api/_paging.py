"""Paging a list endpoint completely: concurrent page fetches yielded in order, then a completeness proof.

A walk fetches page 1 (which states the total), then pages 2..N concurrently with a bounded lookahead,
yielding each page as soon as every page before it has been yielded. A walk is complete when every page
reported the same total, the distinct ids it saw equal that total, and no item it saw was created after
it began. When rows were created or archived while paging (totals differ, ids went missing as rows shifted
between pages, or a creation offset an archive in the total), the pages are walked again, yielding only ids
not yielded before, until a walk is complete or the repair passes run out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._errors import ApiError, IncompleteDataError

ProgressCallback = Callable[[int, int], None]  # (pages done, pages expected so far)


@dataclass(frozen=True)
class Page:
    number: int
    items: list[dict[str, Any]]
    total: int
    total_pages: int | None

    @classmethod
    def from_body(cls, number: int, body: Any, endpoint: str) -> Page:
        meta = body.get("meta") if isinstance(body, dict) else None
        items = body.get("data") if isinstance(body, dict) else None
        if not isinstance(items, list) or not isinstance(meta, dict) or not isinstance(meta.get("total"), int):
            raise ApiError(f"{endpoint} page {number}: expected a list envelope with data and meta.total")
        total_pages = meta.get("total_pages")
        return cls(number, items, meta["total"], total_pages if isinstance(total_pages, int) else None)

    def page_count(self, per_page: int) -> int:
        """Pages of the walk: total_pages when the meta has it, else ceil(total / per_page); at least page 1."""
        if self.total_pages is not None:
            return max(self.total_pages, 1)
        return max(math.ceil(self.total / per_page), 1)


@dataclass
class WalkResult:
    total: int  # the API's total as the walk's last page reported it
    totals: list[int]  # every distinct total the walk's pages reported, in order of appearance
    ids_seen: int  # distinct ids the walk saw
    created_meanwhile: int  # items whose created_at is later than the walk's start

    @property
    def stable(self) -> bool:
        """Every page reported the same total, the walk saw exactly that many distinct ids, and no row
        was created during the walk (a creation and an archive can cancel out in the total, yet shift
        a row past the walk: the creation shows in created_at)."""
        return len(self.totals) == 1 and self.ids_seen == self.total and not self.created_meanwhile

    def describe(self) -> str:
        moved = "" if len(self.totals) == 1 else f" (the total moved: {' -> '.join(map(str, self.totals))})"
        created = f", {self.created_meanwhile} of them created while it paged" if self.created_meanwhile else ""
        return f"the API reports {self.total} items{moved} and a walk saw {self.ids_seen} distinct ids{created}"


class CompletePager:
    """Pages one endpoint completely; iterate `pages()`; afterwards `total` and `vanished_ids` hold the outcome."""

    def __init__(
        self,
        fetch: Callable[[int], Page],
        *,
        endpoint: str,
        per_page: int,
        executor: Executor,
        lookahead: int,
        max_repair_passes: int,
        log: Any,
        progress: ProgressCallback | None = None,
    ):
        self._fetch = fetch
        self._endpoint = endpoint
        self._per_page = per_page
        self._executor = executor
        self._lookahead = max(lookahead, 1)
        self._max_repair_passes = max_repair_passes
        self._log = log
        self._progress = progress
        self._yielded: set[str] = set()
        self._pages_done = 0
        self._pages_expected = 0
        self.total: int | None = None
        self.vanished_ids: set[str] = set()  # yielded, then archived/deleted before the verifying walk

    def pages(self) -> Iterator[list[dict[str, Any]]]:
        walk_ids: set[str] = set()
        result = yield from self._walk(walk_ids)
        passes = 0
        while not result.stable:
            if passes == self._max_repair_passes:
                raise IncompleteDataError(
                    f"{self._endpoint}: incomplete after {passes} repair passes: expected {result.total} ids, "
                    f"{result.describe()}; rows are being created or archived faster than the sync can page "
                    "(raise max_repair_passes or sync at a quieter time)",
                    endpoint=self._endpoint,
                    expected=result.total,
                    seen=result.ids_seen,
                )
            passes += 1
            self._log.warning(
                f"{self._endpoint}: rows moved while paging ({result.describe()}); "
                f"repair pass {passes}/{self._max_repair_passes} re-walks the pages for missed ids"
            )
            walk_ids = set()
            result = yield from self._walk(walk_ids)
        if passes:
            self.vanished_ids = self._yielded - walk_ids
        self.total = result.total

    def _walk(self, walk_ids: set[str]) -> Iterator[list[dict[str, Any]]]:
        started = datetime.now(UTC)
        created_meanwhile = 0
        first = self._fetch(1)
        count = first.page_count(self._per_page)
        self._pages_expected += count
        totals = [first.total]
        for page in self._in_order(first, count):
            if page.total != totals[-1]:
                totals.append(page.total)
            fresh = self._unseen(page, walk_ids)
            created_meanwhile += _created_after(page.items, started)
            if fresh:
                yield fresh
            self._pages_done += 1
            if self._progress is not None:
                self._progress(self._pages_done, self._pages_expected)
        return WalkResult(
            total=totals[-1],
            totals=list(dict.fromkeys(totals)),
            ids_seen=len(walk_ids),
            created_meanwhile=created_meanwhile,
        )

    def _in_order(self, first: Page, count: int) -> Iterator[Page]:
        """Page 1, then pages 2..count fetched concurrently, yielded in page order (bounded buffer)."""
        yield first
        pending: deque[Future[Page]] = deque()
        next_number = 2
        try:
            while pending or next_number <= count:
                while next_number <= count and len(pending) < self._lookahead:
                    pending.append(self._executor.submit(self._fetch, next_number))
                    next_number += 1
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

    def _unseen(self, page: Page, walk_ids: set[str]) -> list[dict[str, Any]]:
        fresh = []
        for item in page.items:
            item_id = item.get("id") if isinstance(item, dict) else None
            if not isinstance(item_id, str):
                raise ApiError(f"{self._endpoint} page {page.number}: an item has no string id")
            walk_ids.add(item_id)
            if item_id not in self._yielded:
                self._yielded.add(item_id)
                fresh.append(item)
        return fresh


def _created_after(items: list[dict[str, Any]], moment: datetime) -> int:
    """How many items carry a created_at later than `moment` (items without a parsable one are not counted)."""
    count = 0
    for item in items:
        value = item.get("created_at")
        if not isinstance(value, str):
            continue
        try:
            created = datetime.fromisoformat(value)
        except ValueError:
            continue
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        if created > moment:
            count += 1
    return count
