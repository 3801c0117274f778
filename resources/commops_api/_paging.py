"""Paging list endpoints completely while the data keeps changing: a `Listing` walks the lists of one
resource (KOLs: the active list, and the archived list it drains into) until it can prove what it holds.

A pass over one list fetches page 1 (which states the total), then pages 2..N-1 concurrently with a
bounded lookahead (`ListWalk.group` says how deep, and why): the pass's body. Its final page N is
fetched alone, after the bodies of the lists walked with it have arrived; when a page's total asks
for more pages, the pass goes on. A round walks the lists in two stages, each this way (the bodies
first, then the final pages in list order): first the lists that drain into another, then the lists
they drain into (KOLs: active, then archived), so the drained list's size is taken after every row
that left the others. Each pass yields only items no earlier pass of its list yielded.

Offset paging over a changing list can miss rows: when a row on a page already read leaves the list,
every later row moves back one place and one of them slips onto the page already read; with pages
fetched concurrently, an insertion can push a row past a page not yet computed. The listing proves, per
list, that every row present in it from the walk's start to its end was seen, in one of two ways, and
assumes nothing of the server's clock:

- **Counted.** The final page of a pass states the list's size at that moment (when it is not full, its
  offset plus its items, which describe the same moment as its items; else its total). Every row seen in
  the list and not seen in the list it drains into was in the list then, or was archived without being
  seen archived: the archived list's own deficit bounds those (rows only ever enter it: the spec has no
  delete and archiving is one-way). So `D = T - |seen - seen archived| + max(D_archived, 0) <= 0` proves
  that no row of the list at that moment was missed. It proves quiet data at once, with exactly
  ceil(T / per_page) requests; while rows are archived it loses a row for every archival between the
  two final pages.
- **Covered.** When the server honours the requested sort (checked on every page it returns, never
  assumed), each page shows every row whose sort key (created_at, then id) lies between its first and its
  last item, as of that moment; page 1 also everything before its first item, and the list's last page
  everything after its last. A row present throughout lies somewhere on that key line, so once the pages'
  key ranges leave no gap, it was seen. Repair passes use another page size, so their page boundaries fall
  elsewhere, and the few gaps left are closed by single probe requests around them.

A list proven neither way is walked again, with the list it drains into, up to `max_repair_passes` times;
the report then says it is not proven, with the counts.

Rows seen by an earlier pass but missing from the final one, and not seen where they drain to, are kept,
except when the final pass alone accounts for its list and every archived row was seen (they left it:
deleted), or a lookup (KOLs: GET /v1/kols/{id}) answers 404. Without a lookup they are named in flux.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from commops_spec.timestamps import UnreadableTimestamp, parse_timestamp

from ._errors import ApiError
from ._idset import IdSet, common, count_outside, outside
from ._read_ahead import ReadAhead

ProgressCallback = Callable[[int, int], None]  # (pages done, pages expected so far)
# ids -> {id: "gone" | "present" | "archived"}; ids it cannot tell are left out
Settle = Callable[[list[str]], dict[str, str]]
Fetch = Callable[[int, int], "Fetched"]  # (page number, per_page) -> the page, decoded or not yet

_SAMPLE = 5
_MAX_PROBE_ROUNDS = 3
_Key = tuple[datetime, str]


@dataclass(frozen=True)
class Page:
    """One list page as received: its items (as dicts, or already decoded into an Arrow record batch
    by the caller's decoder: then `items` is empty), the meta it stated, and when it arrived."""

    number: int
    items: list[dict[str, Any]]
    total: int
    total_pages: int | None
    received_at: datetime  # the client's clock (UTC): orders observations made by this process
    server_date: datetime | None = None  # the response's Date header (the server's clock), when sent
    elapsed: float = 0.0  # seconds the request took, retries excluded
    per_page: int = 100  # the page size it was asked with
    batch: pa.RecordBatch | None = None  # the items, decoded (no dicts were built)

    @property
    def size(self) -> int:
        return self.batch.num_rows if self.batch is not None else len(self.items)

    def ids(self) -> list[Any]:
        """The items' ids, in order (whatever they are: the listing checks they are strings)."""
        if self.batch is not None:
            return self.batch.column("id").to_pylist()
        return [item.get("id") if isinstance(item, dict) else None for item in self.items]

    def decoded_sort_keys(self, field: str, ids: list[str]) -> tuple[bool, _Key | None, _Key | None] | None:
        """For a decoded page whose `field` is a timestamp column without nulls: whether its (value, id)
        keys are in ascending order, and its first and last key, computed in Arrow (no datetime per row).
        None for any other page (the caller reads `sort_values`)."""
        if self.batch is None or not self.size:
            return None
        column = self.batch.column(field) if field in self.batch.schema.names else None
        if column is None or not pa.types.is_timestamp(column.type) or column.null_count:
            return None
        key_ids = self.batch.column("id")
        earlier, later = column.slice(0, self.size - 1), column.slice(1)
        back = pc.or_(pc.less(later, earlier),
                      pc.and_(pc.equal(later, earlier), pc.less(key_ids.slice(1), key_ids.slice(0, self.size - 1))))
        return (not pc.any(back).as_py(), (column[0].as_py(), ids[0]), (column[-1].as_py(), ids[-1]))

    def sort_values(self, field: str) -> list[Any]:
        """The items' values of `field`: datetimes in a decoded batch, as sent otherwise."""
        if self.batch is not None:
            index = self.batch.schema.get_field_index(field)
            return self.batch.column(index).to_pylist() if index >= 0 else [None] * self.size
        return [item.get(field) if isinstance(item, dict) else None for item in self.items]

    @classmethod
    def from_decoded(cls, number: int, batch: pa.RecordBatch, meta: dict[str, Any], endpoint: str, **received: Any) -> Page:
        """A page whose items the caller's decoder turned into a record batch; meta as sent."""
        if not isinstance(meta.get("total"), int):
            raise ApiError(f"{endpoint} page {number}: expected a list envelope with data and meta.total")
        received.setdefault("received_at", datetime.now(UTC))
        total_pages = meta.get("total_pages")
        return cls(number, [], meta["total"], total_pages if isinstance(total_pages, int) else None, batch=batch, **received)

    @classmethod
    def from_body(cls, number: int, body: Any, endpoint: str, **received: Any) -> Page:
        meta = body.get("meta") if isinstance(body, dict) else None
        items = body.get("data") if isinstance(body, dict) else None
        if not isinstance(items, list) or not isinstance(meta, dict) or not isinstance(meta.get("total"), int):
            raise ApiError(f"{endpoint} page {number}: expected a list envelope with data and meta.total")
        total_pages = meta.get("total_pages")
        received.setdefault("received_at", datetime.now(UTC))
        return cls(number, items, meta["total"], total_pages if isinstance(total_pages, int) else None, **received)

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.per_page

    def page_count(self) -> int:
        """Pages of the list at this page's size: ceil(total / per_page), at least page 1 (total_pages,
        when the meta has it, counts pages of the size asked for: the same figure)."""
        return max(math.ceil(self.total / self.per_page), 1)

    @property
    def holds_the_end(self) -> bool:
        """Whether the list ended on this page (as of this page): a page short of per_page, or the total."""
        return self.size < self.per_page or self.offset + self.size >= self.total

    @property
    def size_seen(self) -> int:
        """The list's size as of this page's items: when the page holds the end, its offset plus its items
        (so a total computed a moment apart from the items does not matter); otherwise the stated total."""
        return self.offset + self.size if self.holds_the_end and self.size else self.total

    def only(self, keep: list[bool]) -> Page:
        """This page with only the items `keep` marks."""
        if self.batch is not None:
            return replace(self, batch=self.batch.filter(pa.array(keep)))
        return replace(self, items=[item for item, kept in zip(self.items, keep) if kept])


@dataclass(frozen=True)
class Undecoded:
    """A list page's body as received, left for `Decode` to read together with the pages fetched beside it."""

    number: int
    per_page: int
    body: bytes
    received: dict[str, Any]  # Page's received_at, server_date, elapsed


Fetched = Page | Undecoded
Decode = Callable[[list[Fetched]], list[Page]]  # the pages, in the order given, each decoded


@dataclass(frozen=True)
class ListSource:
    """One list of a resource: its query parameters, and the list its rows leave for (if any)."""

    label: str
    params: dict[str, Any]
    drains_into: str | None = None  # label of the list rows leave this one for (active KOLs -> archived)


@dataclass
class ListVerdict:
    """What the listing proved of one list."""

    label: str
    complete: bool  # no row present in the list from the walk's start to its end can be missing
    final_total: int  # the list's size at its last final page
    rows: int  # rows of the list in the snapshot
    unseen: int  # rows the count says were there at the end and no pass saw (entered or left meanwhile)
    passes: int
    probes: int
    proof: str  # "counted", "covered", or "" when not proven
    gaps: int = 0  # key ranges no page covered (when not proven)


@dataclass
class ListingReport:
    """The completeness of one listing: per list, the proof; over all, the rows in flux."""

    endpoint: str
    lists: list[ListVerdict]
    gone: list[str]  # rows seen, then gone from every list (deleted): left out of the snapshot
    moved: list[str]  # rows seen in one list and then in the list it drains into: their last state kept
    in_flux: dict[str, list[str]]  # reason -> rows kept whose state at the end of the walk is not settled
    looked_up: int = 0  # rows settled one by one (lookup requests)
    started_at: datetime | None = None  # the client's clock: before the first request of the walk
    ended_at: datetime | None = None  # the client's clock: after the last final page or probe arrived

    @property
    def complete(self) -> bool:
        return all(v.complete for v in self.lists)

    @property
    def api_total(self) -> int:
        """The lists' sizes at their last final pages, summed."""
        return sum(v.final_total for v in self.lists)

    @property
    def unseen(self) -> int:
        return sum(v.unseen for v in self.lists)

    @property
    def in_flux_count(self) -> int:
        return self.unseen + sum(len(ids) for ids in self.in_flux.values())

    def in_flux_ids(self) -> list[str]:
        return [item_id for ids in self.in_flux.values() for item_id in ids]

    def in_flux_sample(self) -> list[str]:
        return self.in_flux_ids()[:_SAMPLE]

    def describe(self) -> str:
        parts = []
        for v in self.lists:
            state = f"proven ({v.proof})" if v.complete else f"NOT proven complete ({v.gaps} key range(s) never covered)"
            probes = f", {v.probes} probe(s)" if v.probes else ""
            parts.append(f"{v.label}: {v.rows} rows, the API counts {v.final_total}, {v.passes} pass(es){probes}, {state}")
        flux = [f"{len(ids)} {reason.replace('_', ' ')} ({_sample(ids)})" for reason, ids in self.in_flux.items()]
        in_flux = sum(v.unseen for v in self.lists if v.complete)
        missing = self.unseen - in_flux
        if in_flux:
            flux.insert(0, f"up to {in_flux} counted by the API but not seen: they entered or left while the lists were paged")
        if missing:
            flux.insert(0, f"{missing} counted by the API and not accounted for: rows present throughout may be among them")
        if self.moved:
            flux.append(f"{len(self.moved)} moved between lists while walking, kept in their last state")
        if self.gone:
            flux.append(f"{len(self.gone)} gone from the API, left out ({_sample(self.gone)})")
        return f"{self.endpoint}: " + "; ".join(parts + flux)


@dataclass
class _Pass:
    """What one pass over a list saw: its final page's size, its ids (repair passes only)."""

    per_page: int
    final_total: int = 0
    pages: int = 0
    ids: IdSet | None = None  # None for a first pass: then every id yielded


class _Coverage:
    """The key ranges the pages of a list have shown whole (see the module docstring, "Covered")."""

    def __init__(self) -> None:
        self.ranges: list[tuple[_Key | None, _Key | None]] = []  # (first, last); None: the list's start / end
        self.positions: dict[_Key, int] = {}  # a range end's position in the list when last seen

    def add(self, first: _Key | None, last: _Key | None) -> None:
        self.ranges.append((first, last))

    def gaps(self) -> list[tuple[_Key | None, _Key | None]]:
        """The open key ranges no page showed: (after this key, before that key); (None, None) when no
        page covered anything."""
        if not self.ranges:
            return [(None, None)]
        ordered = sorted(self.ranges, key=lambda r: (r[0] is not None, r[0] or _MIN))
        gaps: list[tuple[_Key | None, _Key | None]] = []
        if ordered[0][0] is not None:
            gaps.append((None, ordered[0][0]))
        reach = ordered[0][1]
        for first, last in ordered[1:]:
            if reach is None:
                return gaps  # something already reaches the list's end
            if first is not None and first > reach:
                gaps.append((reach, first))
            if last is None or last > reach:
                reach = last
        if reach is not None:
            gaps.append((reach, None))
        return gaps


_MIN: _Key = (datetime.min.replace(tzinfo=UTC), "")


class ListWalk:
    """Passes over one list, each in two phases (body, final page), and probes; remembers every id it
    yielded, what each pass saw, and which key ranges its pages covered."""

    def __init__(self, source: ListSource, fetch: Fetch, decode: Decode, *, endpoint: str, per_page: int,
                 executor: Executor, lookahead: int, sort: str | None, descending: bool,
                 progress: ProgressCallback | None) -> None:
        self.source = source
        self.fetch = fetch
        self.decode = decode
        self.endpoint = endpoint
        self.per_page = per_page
        self.executor = executor
        self.lookahead = max(lookahead, 1)
        # Pages decoded together: a quarter of the lookahead (up to half, when more have arrived). The rest
        # stays in flight while the caller works through a group, so the fetch threads do not run dry during
        # its longest pause: a snapshot's row group of 10,000 rows, 30-50 ms, a dozen pages at full speed.
        self.group = max(self.lookahead // 4, 1)
        self.sort = None if descending else sort  # key ranges are read in ascending order only
        self.progress = progress
        self.yielded = IdSet()
        self.passes: list[_Pass] = []
        self.coverage = _Coverage()
        self.sorted_pages = self.sort is not None  # False once a page did not honour the sort
        self.probes = 0
        self._planned = 0
        self._next = 0
        self._pages_done = 0
        self._pages_expected = 0

    @property
    def last(self) -> _Pass:
        return self.passes[-1]

    def forget(self) -> None:
        """Free what the walk saw, once the listing has judged it."""
        self.yielded = IdSet()
        for done in self.passes:
            done.ids = None if done.ids is None else IdSet()
        self.coverage = _Coverage()

    def last_ids(self) -> IdSet:
        """Ids the last pass saw."""
        ids = self.last.ids
        return self.yielded if ids is None else ids

    def body(self) -> Iterator[Page]:
        """Start a pass: page 1, then every page before the final one, concurrently, yielded in order.
        A repair pass uses a page size one smaller than the pass before, so its page boundaries fall
        between other rows."""
        if len(self.passes) > 1 and self.passes[-2].ids is not None:
            self.passes[-2].ids = IdSet()  # only the last pass's ids matter: free the older one
        per_page = self.per_page if not self.passes else max(self.last.per_page - 1, 1)
        self.passes.append(_Pass(per_page=per_page, ids=None if not self.passes else IdSet()))
        first = self._fetch_now(1, per_page)
        self._planned, self._next = 0, 2
        yield from self._noted(first)
        pending: deque[Future[Fetched]] = deque()
        try:
            while self._next < self._planned or pending:
                while self._next < self._planned and len(pending) < self.lookahead:
                    pending.append(self.executor.submit(self.fetch, self._next, per_page))
                    self._next += 1
                # The next pages in order, and as many again after them if they have arrived: one group
                arrived = [pending.popleft().result() for _ in range(min(self.group, len(pending)))]
                while pending and pending[0].done() and len(arrived) < 2 * self.group:
                    arrived.append(pending.popleft().result())
                for page in self.decode(arrived):
                    yield from self._noted(page)
        finally:
            for future in pending:
                future.cancel()

    def final(self, sort_honoured: bool) -> Iterator[Page]:
        """End the pass: the final page alone (nothing else of the listing is in flight), then, while its
        total asks for more, the pages after it. The last of them states the list's size at the end."""
        while self._next <= self._planned:  # a one-page list has none: page 1 was its final page
            page = self._fetch_now(self._next, self.last.per_page)
            self._next += 1
            yield from self._noted(page)
        if not sort_honoured:
            self.sorted_pages = False

    def probe(self, gaps: list[tuple[_Key | None, _Key | None]]) -> Iterator[Page]:
        """One request around each gap's position, concurrently: a page whose key range, if the list has
        not moved much since, spans the gap."""
        requests = [_probe_request(self._position(gap)) for gap in gaps]
        futures = [self.executor.submit(self.fetch, number, per_page) for number, per_page in dict.fromkeys(requests)]
        self.probes += len(futures)
        for page in self.decode([future.result() for future in futures]):
            yield from self._noted(page, probe=True)

    def _fetch_now(self, number: int, per_page: int) -> Page:
        return self.decode([self.fetch(number, per_page)])[0]

    def _position(self, gap: tuple[_Key | None, _Key | None]) -> int:
        after, before = gap
        if before is not None and before in self.coverage.positions:
            return self.coverage.positions[before]
        if after is not None and after in self.coverage.positions:
            return self.coverage.positions[after] + 1
        return 0

    def _noted(self, page: Page, *, probe: bool = False) -> Iterator[Page]:
        """Record the page (ids, size, key range, how many pages the list now has); yield its fresh items."""
        current = self.last
        if not probe:
            current.pages += 1
            current.final_total = page.size_seen
            count = page.page_count()
            if count > self._planned:
                self._pages_expected += count - self._planned
                self._planned = count
        ids = page.ids()
        if not all(isinstance(item_id, str) for item_id in ids):
            raise ApiError(f"{self.endpoint} page {page.number}: an item has no string id")
        self._cover(page, ids)
        if current.ids is not None and not probe:
            current.ids.add_new(ids)
        keep = self.yielded.add_new(ids)
        if not probe:
            self._pages_done += 1
            if self.progress is not None:
                self.progress(self._pages_done, self._pages_expected)
        if all(keep):
            if ids:
                yield page
        elif any(keep):
            yield page.only(keep)

    def _cover(self, page: Page, ids: list[str]) -> None:
        """Add the page's key range, once its items are seen to honour the sort."""
        if not self.sorted_pages:
            return
        decoded = page.decoded_sort_keys(self.sort, ids)
        if decoded is not None:
            ascending, first, last = decoded
        else:
            keys = []
            for value, item_id in zip(page.sort_values(self.sort), ids):
                try:
                    moment = value if isinstance(value, datetime) else parse_timestamp(value)
                except UnreadableTimestamp:
                    self.sorted_pages = False
                    return
                keys.append((moment, item_id))
            ascending = not any(later < earlier for earlier, later in zip(keys, keys[1:]))
            first, last = (keys[0], keys[-1]) if keys else (None, None)
        if not ascending:
            self.sorted_pages = False
            return
        if first is None:
            if page.offset == 0:
                self.coverage.add(None, None)  # the list was empty at that moment
            return
        self.coverage.add(None if page.offset == 0 else first, None if page.holds_the_end else last)
        self.coverage.positions[first] = page.offset
        self.coverage.positions[last] = page.offset + len(ids) - 1


def _probe_request(position: int) -> tuple[int, int]:
    """(page number, per_page) of a page that holds `position` well inside it, not at an edge."""
    for per_page in range(100, 66, -1):
        inside = position % per_page
        if per_page // 4 <= inside <= 3 * per_page // 4:
            return position // per_page + 1, per_page
    return position // 100 + 1, 100


class Listing:
    """Every list of one resource, walked in rounds until each is proven complete or the repair passes
    run out. Iterate `pages()` for (source, page) pairs, each id of a list once; afterwards `report`
    holds the proof per list and the rows in flux, and `drop_ids` the rows gone from the API."""

    def __init__(self, walks: Sequence[ListWalk], *, endpoint: str, max_repair_passes: int, log: Any,
                 settle: Settle | None = None, sort_honoured: Callable[[], bool] = lambda: True,
                 max_probes: int = 64) -> None:
        self.walks = {w.source.label: w for w in walks}
        self.endpoint = endpoint
        self.max_repair_passes = max_repair_passes
        self.log = log
        self.settle = settle
        self.sort_honoured = sort_honoured
        self.max_probes = max_probes
        self.report: ListingReport | None = None
        self.drop_ids: frozenset[str] = frozenset()
        self._looked_up = 0
        self._gone: set[str] = set()
        self._confirmed: dict[str, set[str]] = {}  # label -> vanished ids a lookup found still there
        self._in_flux: dict[str, set[str]] = {}
        self._ahead: ReadAhead[tuple[ListSource, Page]] | None = None

    def pages(self) -> Iterator[tuple[ListSource, Page]]:
        """The listing's (source, page) pairs: walked here, or read from the thread `read_ahead` started."""
        return iter(self._ahead) if self._ahead is not None else self._walked()

    def read_ahead(self, depth: int) -> None:
        """Start walking now, on a thread of its own, at most `depth` pages ahead, until `pages()`'s reader
        comes and takes the walk back (resources/commops_api/_read_ahead.py)."""
        self._ahead = ReadAhead(self._walked(), depth=depth, name=f"read-ahead {self.endpoint}")

    def close(self) -> None:
        """End a walk read ahead: stopped if its reader never came (a run that ends before that step)."""
        if self._ahead is not None:
            self._ahead.close()

    def _walked(self) -> Iterator[tuple[ListSource, Page]]:
        started = datetime.now(UTC)
        to_walk = list(self.walks.values())
        repairs = 0
        while True:
            # A list others drain into is walked after their final pages, so the size it states is taken
            # after every row that left them: read before, a row leaving in between is counted by neither.
            targets = {walk.source.drains_into for walk in to_walk}
            for stage in ([w for w in to_walk if w.source.label not in targets],
                          [w for w in to_walk if w.source.label in targets]):
                for walk in stage:
                    for page in walk.body():
                        yield walk.source, page
                for walk in stage:
                    for page in walk.final(self.sort_honoured()):
                        yield walk.source, page
            yield from self._probe_gaps()
            ended = datetime.now(UTC)
            self._settle_vanished(to_walk)
            verdicts = {label: self._verdict(walk) for label, walk in self.walks.items()}
            unproven = [label for label, verdict in verdicts.items() if not verdict.complete]
            if not unproven or repairs == self.max_repair_passes:
                break
            repairs += 1
            to_walk = self._rewalk(unproven)
            self.log.warning(
                f"{self.endpoint}: rows moved while paging ({'; '.join(_why(verdicts[u]) for u in unproven)}); "
                f"repair pass {repairs}/{self.max_repair_passes} walks {', '.join(w.source.label for w in to_walk)} again"
            )
        self.report = self._report(verdicts)
        self.report.started_at, self.report.ended_at = started, ended
        self.drop_ids = frozenset(self._gone)
        for walk in self.walks.values():
            walk.forget()  # the report holds what the checks and the merge need; free the ids before them
        if not self.report.complete:
            self.log.warning(f"{self.report.describe()}. Rows are changing faster than the sync can page: "
                             "raise max_repair_passes or sync at a quieter time")

    # -- judging -----------------------------------------------------------------------------------

    def _deficit(self, walk: ListWalk, ids: IdSet) -> int:
        """Rows of the list at its last final page that `ids` (what was seen of it) cannot account for."""
        target = walk.source.drains_into
        if target is None:
            return walk.last.final_total - count_outside(ids, self._gone)
        drained = self.walks[target]
        return (walk.last.final_total - count_outside(ids, drained.yielded, self._gone)
                + max(self._deficit(drained, drained.yielded), 0))

    def _counted(self, walk: ListWalk) -> bool:
        return self._deficit(walk, walk.yielded) <= 0 and (
            walk.source.drains_into is None or self._counted(self.walks[walk.source.drains_into])
        )

    def _covered(self, walk: ListWalk) -> bool:
        return walk.sorted_pages and not walk.coverage.gaps()

    def _verdict(self, walk: ListWalk) -> ListVerdict:
        counted, covered = self._counted(walk), self._covered(walk)
        target = walk.source.drains_into
        left = self.walks[target].yielded if target is not None else IdSet()
        return ListVerdict(
            label=walk.source.label, complete=counted or covered, final_total=walk.last.final_total,
            rows=count_outside(walk.yielded, left, self._gone), unseen=max(self._deficit(walk, walk.yielded), 0),
            passes=len(walk.passes), probes=walk.probes,
            proof="counted" if counted else ("covered" if covered else ""),
            gaps=0 if counted or covered or not walk.sorted_pages else len(walk.coverage.gaps()),
        )

    def _probe_gaps(self) -> Iterator[tuple[ListSource, Page]]:
        """For lists the count cannot prove, probe the few key ranges no page covered (a repair pass
        is cheaper when there are many)."""
        for _ in range(_MAX_PROBE_ROUNDS):
            probing = []
            for walk in self.walks.values():
                if self._counted(walk) or not walk.sorted_pages:
                    continue
                gaps = walk.coverage.gaps()
                if gaps and len(gaps) <= min(self.max_probes, max(walk.last.pages // 4, 1)):
                    probing.append((walk, gaps))
            if not probing:
                return
            for walk, gaps in probing:
                for page in walk.probe(gaps):
                    yield walk.source, page

    def _rewalk(self, unproven: list[str]) -> list[ListWalk]:
        """The unproven lists, each with the list it drains into (what left it is counted after it)."""
        labels = set(unproven)
        for label in unproven:
            target = self.walks[label].source.drains_into
            if target is not None:
                labels.add(target)
        return [walk for label, walk in self.walks.items() if label in labels]

    # -- settling rows seen earlier but missing from the final pass ---------------------------------

    def _settle_vanished(self, walked: list[ListWalk]) -> None:
        """Rows an earlier pass saw that the final pass did not, and that were not seen where they drain.

        They are still in the list (a shift hid them from the final pass), or were archived without being
        seen archived, or were deleted. When the final pass alone accounts for the list and every row of the
        list it drains into was seen, they were deleted: gone. Otherwise a lookup, where one exists, tells."""
        for walk in walked:
            if walk.last.ids is None:
                continue  # a first pass: nothing was seen earlier
            label, target = walk.source.label, walk.source.drains_into
            drained = self.walks[target] if target is not None else None
            vanished = set(outside(walk.yielded, walk.last_ids(), drained.yielded if drained else IdSet(),
                                   self._gone, self._confirmed.get(label, set())))
            if not vanished:
                continue
            all_drained_seen = drained is None or self._deficit(drained, drained.yielded) <= 0
            if self._deficit(walk, walk.last_ids()) <= 0 and all_drained_seen:
                self._gone |= vanished
                continue
            if self.settle is None:
                self._in_flux.setdefault("seen_then_missing", set()).update(vanished)
                continue
            states = self.settle(sorted(vanished))
            self._looked_up += len(states)
            unsettled = vanished - states.keys()  # ids the settler may not look up
            if unsettled:
                self._in_flux.setdefault("seen_then_missing", set()).update(unsettled)
            for item_id, state in states.items():
                if state == "gone":
                    self._gone.add(item_id)
                    continue
                self._confirmed.setdefault(label, set()).add(item_id)
                if state == "archived" and target is not None:
                    self._in_flux.setdefault("archived_after_the_archived_list_was_read", set()).add(item_id)

    def _report(self, verdicts: dict[str, ListVerdict]) -> ListingReport:
        moved: set[str] = set()
        for walk in self.walks.values():
            if walk.source.drains_into is not None:
                moved |= common(walk.yielded, self.walks[walk.source.drains_into].yielded)
        in_flux = {reason: sorted(ids - self._gone) for reason, ids in self._in_flux.items() if ids - self._gone}
        return ListingReport(
            endpoint=self.endpoint, lists=list(verdicts.values()), gone=sorted(self._gone), moved=sorted(moved),
            in_flux=in_flux, looked_up=self._looked_up,
        )


class Walk:
    """A listing of one list that rows only enter: `pages()` yields its pages; afterwards `report`,
    `total` (the API's total at the end) and `drop_ids` (rows gone from the API)."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing

    def pages(self) -> Iterator[Page]:
        for _, page in self.listing.pages():
            yield page

    @property
    def report(self) -> ListingReport:
        assert self.listing.report is not None, "iterate pages() first"
        return self.listing.report

    @property
    def total(self) -> int:
        return self.report.api_total

    @property
    def drop_ids(self) -> frozenset[str]:
        return self.listing.drop_ids


def _why(verdict: ListVerdict) -> str:
    return f"{verdict.label}: the API counts {verdict.final_total}, {verdict.rows} accounted for"


def _sample(ids: Sequence[str]) -> str:
    ids = list(ids)
    more = f" and {len(ids) - _SAMPLE} more" if len(ids) > _SAMPLE else ""
    return ", ".join(ids[:_SAMPLE]) + more
