"""ApiClient: GET requests to the Commercial Operations API with one shared rate budget, retries and paging."""

from __future__ import annotations

import functools
import json
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import urlsplit

import httpx
import tenacity

from commops_spec.constants import SCOPES, is_spec_id
from resources.settings import (
    API_KEY_ENV,
    BASE_URL_ENV,
    CONNECT_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    REQUEST_DEADLINE_SECONDS,
    UNRESPONSIVE_ENV,
    UNRESPONSIVE_SECONDS,
)

from ._errors import (
    ApiError,
    ApiUnavailableError,
    AuthenticationError,
    NotFoundError,
    ScopeError,
)
from ._paths import item_path
from ._paging import Fetched, ListSource, ListWalk, Listing, Page, ProgressCallback, Undecoded, Walk
from ._rate import RateBudget
from ._stats import RequestStats

_default_log = logging.getLogger("commops.api")
# Retries and waits, one line each: `commops sync` prints this logger's lines on stderr (a log under cron
# shows what the sync waits for); a Dagster run has them in its own log as well.
_notices = logging.getLogger("commops.api.notices")

# Waits on 429 for one request before giving up (each wait is Retry-After or the window reset).
_MAX_RATE_LIMITED_WAITS = 20
_PAGES_AHEAD_PER_THREAD = 8  # a walk's lookahead: pages requested and not yet read, per fetch thread
# A 429 asking to wait longer than this (the plan's daily limit, typically) fails the run instead.
_MAX_RATE_LIMITED_PAUSE_SECONDS = 900.0


class _TransientError(Exception):
    """A failure worth retrying: 5xx, timeout, dropped connection, broken body."""


class _RequestDeadline(Exception):
    """A response still arriving at its request's overall deadline (a server sending a trickle)."""


# A caller's decoder of list pages: the raw bodies of one or more pages -> per page (record batch of the
# items, meta), or None when they cannot be decoded together. One page that will not decode alone is read
# as dicts, and a body that is no JSON at all is fetched again, retried as broken.
Decoder = Callable[[Sequence[bytes]], "list[tuple[Any, dict[str, Any]]] | None"]


@dataclass(frozen=True)
class _Raw:
    content: bytes  # a 2xx response's body, not parsed yet


@dataclass(frozen=True)
class _Reply:
    body: Any
    server_date: datetime | None  # the Date header: the server's clock, one-second precision
    elapsed: float  # seconds from sending the request to reading the whole response


@functools.cache
def _ssl_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """httpx's default context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), made once per process: loading the
    CA bundle costs ~0.1 s, paid by every run of a long-lived process (`commops events follow`) otherwise."""
    return httpx.create_ssl_context()


class ApiClient:
    """A client for one run: its rate budget and request cap are shared by every endpoint it calls.

    Thread-safe. `walk` pages an endpoint completely, `get_many` fetches many single objects,
    both concurrently on `max_concurrency` worker threads and connections."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        per_page: int = 100,
        max_concurrency: int = 4,
        max_requests: int = 100_000,
        timeout: float = READ_TIMEOUT_SECONDS,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
        request_deadline: float = REQUEST_DEADLINE_SECONDS,
        unresponsive_seconds: float = UNRESPONSIVE_SECONDS,
        max_retries: int = 6,
        max_repair_passes: int = 5,
        backoff_initial: float = 0.25,
        backoff_max: float = 10.0,
        log: Any = None,
        on_response: Callable[[httpx.Response], None] | None = None,
        api_key_env: str = API_KEY_ENV,
    ):
        if not base_url:
            raise ValueError(f"base_url is empty: set {BASE_URL_ENV} (it includes /v1)")
        if not api_key:
            raise ValueError(f"api_key is empty: set {api_key_env}")
        self._api_key_env = api_key_env  # named in messages: where the key came from
        self.base_url = base_url.rstrip("/")
        self._host = urlsplit(self.base_url).netloc
        self.per_page = per_page
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.max_repair_passes = max_repair_passes
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._log = log if log is not None else _default_log
        self._budget = RateBudget(max_requests, on_wait=self._waiting_for_window)
        self._read_timeout = timeout
        self._connect_timeout = connect_timeout
        self._request_deadline = request_deadline
        self._unresponsive_seconds = unresponsive_seconds
        self._last_answer = 0.0  # time.monotonic() of the last answer to any request
        self._unresponsive: str | None = None  # why the host was given up on: every later request fails so
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            # One connection per worker, plus one for calls made from the caller's own thread.
            limits=httpx.Limits(max_connections=max_concurrency + 1, max_keepalive_connections=max_concurrency + 1),
            follow_redirects=False,
            verify=_ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")),
            # Observers (benchmarks, metrics) see every response's status and headers, before its body.
            event_hooks={"response": [on_response]} if on_response else None,
        )
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="commops-api")
        self._lock = threading.Lock()
        self._retries = 0
        self._pages = 0
        self._sort_rejected: set[str] = set()
        self._reached = False  # any HTTP answer received: later connection failures are retried

    def __repr__(self) -> str:
        return f"ApiClient(base_url={self.base_url!r}, per_page={self.per_page}, max_concurrency={self.max_concurrency})"

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._budget.stop("the client is closed")  # wakes workers waiting for the rate window
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    @property
    def stats(self) -> RequestStats:
        with self._lock:
            retries, pages = self._retries, self._pages
        return RequestStats(
            requests=self._budget.sent,
            retries=retries,
            rate_limited=self._budget.rate_limited_count,
            throttled_seconds=self._budget.throttled_seconds,
            pages=pages,
        )

    # -- public operations ---------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """GET one object; returns the envelope's `data`."""
        body = self._get_json(path, params)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise ApiError(f"GET {self._url(path)}: expected an object envelope with data")
        return data

    def get_many(
        self,
        paths: Iterable[str],
        params: Mapping[str, Any] | None = None,
        *,
        skip_missing: bool = False,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """GET many objects concurrently; yields (path, data) as each completes (not in input order).

        With skip_missing, paths answering 404 (e.g. deleted meanwhile) are left out instead of raising."""
        remaining = iter(paths)
        pending: dict[Future[dict[str, Any]], str] = {}

        def top_up() -> None:
            while len(pending) < 2 * self.max_concurrency:
                path = next(remaining, None)
                if path is None:
                    return
                pending[self._executor.submit(self.get, path, params)] = path

        try:
            top_up()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    path = pending.pop(future)
                    try:
                        data = future.result()
                    except NotFoundError:
                        if not skip_missing:
                            raise
                        self._log.debug(f"{path}: 404, skipped")
                        continue
                    yield path, data
                top_up()
        finally:
            for future in pending:
                future.cancel()

    def listing(
        self,
        path: str,
        sources: Sequence[ListSource],
        *,
        sort: str | None = "created_at",
        order: str = "asc",
        lookup_path: str | None = None,
        progress: Callable[[str], ProgressCallback | None] | None = None,
        decoders: Mapping[str, Decoder] | None = None,
    ) -> Listing:
        """A complete listing of the lists of one resource (e.g. active and archived KOLs): iterate
        `listing.pages()` for (source, page) pairs, each id of a list once, page by page. Afterwards
        `listing.report` says what was proven (see _paging) and `listing.drop_ids` names rows gone
        from the API.

        `decoders` (per list label) turn pages' raw bytes into (record batch, meta) per page, or None for
        the dict path: the worker threads only fetch, and the listing decodes each page with the pages that
        arrived beside it, in one call, then reads ids and sort values from the batches; no Python objects
        are built for the items.
        `sort` is the field rows are listed by (ascending: new rows land on the last page); a server
        that rejects it is paged unsorted. `lookup_path` (e.g. "/kols/{id}") settles rows an earlier
        pass saw and the final one did not. `progress(label)` gives each list's page callback."""
        decoders = decoders or {}
        walks = []
        for source in sources:
            decoder = decoders.get(source.label)
            fetch = self._page_fetcher(path, dict(source.params), sort, order, raw=decoder is not None)
            walks.append(ListWalk(
                source, fetch, self._page_decoder(path, fetch, decoder), endpoint=path, per_page=self.per_page,
                executor=self._executor, lookahead=_PAGES_AHEAD_PER_THREAD * self.max_concurrency, sort=sort,
                descending=order == "desc",
                progress=progress(source.label) if progress is not None else None,
            ))
        return Listing(
            walks,
            endpoint=path,
            max_repair_passes=self.max_repair_passes,
            log=self._log,
            settle=self._settler(lookup_path) if lookup_path else None,
            sort_honoured=lambda: path not in self._sort_rejected,
        )

    def walk(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        sort: str | None = "created_at",
        order: str = "asc",
        progress: ProgressCallback | None = None,
    ) -> Walk:
        """A complete listing of one list that rows only enter (campaigns, products, signals, archived
        KOLs): iterate `walk.pages()` for its pages; afterwards `walk.report` and `walk.total`."""
        source = ListSource(path, dict(params or {}))
        return Walk(self.listing(path, [source], sort=sort, order=order, progress=lambda _: progress))

    def _page_fetcher(self, path: str, base_params: dict[str, Any], sort: str | None, order: str,
                      raw: bool = False) -> Callable[..., Fetched]:
        """fetch(number, per_page): the page; with `raw`, its body left undecoded (`raw=False` overrides)."""
        sorted_params = {**base_params, "sort": sort, "order": order} if sort else base_params

        def fetch(number: int, per_page: int, *, raw: bool = raw) -> Fetched:
            use = base_params if path in self._sort_rejected else sorted_params
            try:
                reply = self._get(path, {**use, "per_page": per_page, "page": number}, raw=raw)
            except ApiError as error:
                if use is base_params or not _is_sort_rejection(error):
                    raise
                self._reject_sort(path, sort, error)
                reply = self._get(path, {**base_params, "per_page": per_page, "page": number}, raw=raw)
            with self._lock:
                self._pages += 1
            received = {"received_at": datetime.now(UTC), "server_date": reply.server_date, "elapsed": reply.elapsed}
            if isinstance(reply.body, _Raw):
                return Undecoded(number, per_page, reply.body.content, received)
            return Page.from_body(number, reply.body, path, per_page=per_page, **received)

        return fetch

    def _page_decoder(self, path: str, fetch: Callable[..., Fetched],
                      decoder: Decoder | None) -> Callable[[list[Fetched]], list[Page]]:
        """decode(fetched): the pages decoded, undecoded ones together by `decoder` (one call for all of
        them), else one by one, else as dicts; a body that is no JSON is fetched again, as broken."""

        def one(page: Undecoded, decoded: tuple[Any, dict[str, Any]] | None) -> Page:
            if decoded is None and decoder is not None:
                decoded = (decoder([page.body]) or [None])[0]
            if decoded is not None:
                return Page.from_decoded(page.number, *decoded, path, per_page=page.per_page, **page.received)
            try:
                body = json.loads(page.body)
            except ValueError:
                self._log.warning(f"GET {path} page {page.number}: invalid JSON body ({len(page.body)} bytes); fetching it again")
                return fetch(page.number, page.per_page, raw=False)
            return Page.from_body(page.number, body, path, per_page=page.per_page, **page.received)

        def decode(fetched: list[Fetched]) -> list[Page]:
            undecoded = [page for page in fetched if isinstance(page, Undecoded)]
            together = decoder([page.body for page in undecoded]) if decoder is not None and len(undecoded) > 1 else None
            decoded = iter(together or [None] * len(undecoded))  # per undecoded page, in order
            return [page if isinstance(page, Page) else one(page, next(decoded)) for page in fetched]

        return decode

    def _settler(self, lookup_path: str) -> Callable[[list[str]], dict[str, str]]:
        """ids -> {id: "gone" (404), "archived" (the object says is_archived) or "present"}; an id that is
        not a spec id is never looked up and left out (it stays unsettled)."""

        def settle(ids: list[str]) -> dict[str, str]:
            fetchable = [item_id for item_id in ids if is_spec_id(item_id)]
            paths = {item_path(lookup_path, id=item_id): item_id for item_id in fetchable}
            states = dict.fromkeys(fetchable, "gone")
            for found, data in self.get_many(list(paths), skip_missing=True):
                states[paths[found]] = "archived" if data.get("is_archived") is True else "present"
            return states

        return settle

    # -- one request, retried ------------------------------------------------------------------

    def _get_json(self, path: str, params: Mapping[str, Any] | None) -> Any:
        return self._get(path, params).body

    def _get(self, path: str, params: Mapping[str, Any] | None, *, raw: bool = False) -> _Reply:
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_TransientError),
            wait=tenacity.wait_random_exponential(multiplier=self._backoff_initial, max=self._backoff_max),
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            before_sleep=lambda state: self._before_retry(path, params, state),
            reraise=True,
        )
        try:
            return retrying(self._attempt, path, params, raw, time.monotonic())
        except _TransientError as error:
            raise ApiUnavailableError(
                f"GET {self._url(path)} failed after {self.max_retries + 1} attempts: {error}"
            ) from None

    def _attempt(self, path: str, params: Mapping[str, Any] | None, raw: bool, since: float) -> Any:
        """One request (`since`: when its first attempt began), waiting out 429s."""
        for _ in range(_MAX_RATE_LIMITED_WAITS + 1):
            self._budget.acquire()
            try:
                response, elapsed = self._send(path, params, since)
            except httpx.UnsupportedProtocol as error:
                self._budget.release(None)
                raise ApiError(f"cannot call {self._url(path)}: {error}") from None
            except httpx.ConnectError as error:
                self._budget.release(None)
                if not self._reached:  # nothing ever answered: a wrong address, not a passing fault
                    raise ApiUnavailableError(
                        f"cannot connect to {self.base_url} ({error or 'connection refused'}): is the service "
                        "running, and is COMMOPS_BASE_URL right?"
                    ) from None
                self._check_silence(path, since, error)
                raise _TransientError(f"{type(error).__name__}: {error or 'no detail'}") from None
            except (httpx.TransportError, httpx.DecodingError, _RequestDeadline) as error:
                self._budget.release(None)
                self._check_silence(path, since, error)
                raise _TransientError(_describe(error)) from None
            except BaseException:
                self._budget.release(None)
                raise
            self._reached = True
            if response.status_code != 429:
                self._budget.release(response.headers)
                return _Reply(self._interpret(response, raw), _server_date(response), elapsed)
            pause = self._budget.rate_limited(response.headers, max_pause=_MAX_RATE_LIMITED_PAUSE_SECONDS)
            if pause > _MAX_RATE_LIMITED_PAUSE_SECONDS:
                raise ApiError(
                    f"GET {self._url(path)}: rate limited (429) for the next {pause:.0f} s, probably the plan's "
                    "daily request limit; sync again after it resets",
                    status_code=429,
                    code=_error_fields(response)[0],
                )
            self._notice(f"GET {_loggable(path, params)}: 429 rate limited, all requests pause {pause:.2f} s", info=True)
        raise ApiUnavailableError(
            f"GET {self._url(path)} still rate limited (429) after {_MAX_RATE_LIMITED_WAITS} waits"
        )

    def _send(self, path: str, params: Mapping[str, Any] | None, since: float) -> tuple[httpx.Response, float]:
        """One GET read to its last byte within its deadlines: connect, each read, the whole request, and
        what is left of the API's allowed silence. Returns the response (its body read) and its seconds."""
        left = self._unresponsive_seconds - self._check_silence(path, since, None)
        overall = min(self._request_deadline, left)
        timeout = httpx.Timeout(min(self._read_timeout, overall), connect=min(self._connect_timeout, overall))
        started = time.monotonic()
        request = self._http.build_request("GET", path, params=_query(params), timeout=timeout)
        response = self._http.send(request, stream=True)
        try:
            self._answered()
            body = bytearray()
            for chunk in response.iter_raw():  # the overall deadline, checked as each chunk arrives
                body += chunk
                if time.monotonic() - started > overall:
                    raise _RequestDeadline(f"no complete answer within {overall:g} s")
        finally:
            response.close()
        self._answered()
        # The body as received (still compressed when it was), decoded as the response reads it.
        whole = httpx.Response(response.status_code, headers=response.headers, content=bytes(body), request=request)
        return whole, time.monotonic() - started

    def _answered(self) -> None:
        with self._lock:
            self._last_answer = time.monotonic()

    def _check_silence(self, path: str, since: float, error: BaseException | None) -> float:
        """The seconds the request begun at `since` has waited with no answer from the API to any request;
        ApiUnavailableError once that is the allowed silence: the run fails, naming the host and the
        deadline, instead of waiting in silence."""
        with self._lock:
            silent = time.monotonic() - max(since, self._last_answer)
            if self._unresponsive is None and silent >= self._unresponsive_seconds:
                cause = f"; last: {_describe(error)}" if error is not None else ""
                self._unresponsive = (
                    f"{self._host} answered no request for {silent:.0f} s, the deadline "
                    f"({UNRESPONSIVE_ENV}={self._unresponsive_seconds:g}{cause}): GET {self._url(path)} "
                    "given up; is the service up?"
                )
            if self._unresponsive is not None:
                raise ApiUnavailableError(self._unresponsive)
        return silent

    def _waiting_for_window(self, seconds: float) -> None:
        self._notice(f"{self._host}: the rate window is used up; requests wait {seconds:.1f} s for it to reset",
                     info=True)

    def _notice(self, message: str, *, info: bool = False) -> None:
        """One line to the run's log and to the notices `commops sync` prints."""
        _notices.info(message)
        if self._log is not _default_log:
            (self._log.info if info else self._log.warning)(message)

    def _interpret(self, response: httpx.Response, raw: bool = False) -> Any:
        """A 2xx response's body (parsed, or `_Raw` bytes); an error response raised as its error."""
        status = response.status_code
        url = str(response.request.url.copy_with(query=None))
        if 200 <= status < 300:
            if raw:
                return _Raw(response.content)
            try:
                return response.json()
            except ValueError:
                raise _TransientError(f"invalid JSON body ({len(response.content)} bytes, status {status})") from None
        code, message, details = _error_fields(response)
        if status == 401:
            raise AuthenticationError(
                f"API key rejected (401) by {url}: check {self._api_key_env}", status_code=401, code=code, details=details
            )
        if status == 403:
            scope = _required_scope(message, details)
            reason = f"this key lacks scope {scope}" if scope else f"this key may not do this ({message or 'forbidden'})"
            raise ScopeError(
                f"403: {reason} (GET {url})", required_scope=scope, status_code=403, code=code, details=details
            )
        if status >= 500:
            raise _TransientError(f"{status} {code or response.reason_phrase}")
        error_type = NotFoundError if status == 404 else ApiError
        raise error_type(
            f"GET {url} failed with {status} {code or ''}: {message or response.reason_phrase}".replace("  ", " "),
            status_code=status,
            code=code,
            details=details,
        )

    def _before_retry(self, path: str, params: Mapping[str, Any] | None, state: tenacity.RetryCallState) -> None:
        with self._lock:
            self._retries += 1
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        self._notice(
            f"GET {_loggable(path, params)} attempt {state.attempt_number}/{self.max_retries + 1} failed ({error}); "
            f"retrying in {delay:.2f} s"
        )

    def _reject_sort(self, path: str, sort: str | None, error: ApiError) -> None:
        with self._lock:
            first_time = path not in self._sort_rejected
            self._sort_rejected.add(path)
        if first_time:
            self._log.warning(f"{path}: the server rejected sort={sort} ({error}); paging without a sort parameter")

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def _describe(error: BaseException) -> str:
    """A transport failure in a few words; httpx's timeouts often carry no message."""
    if isinstance(error, httpx.ConnectTimeout):
        return "ConnectTimeout: no connection within the connect timeout"
    if isinstance(error, httpx.ReadTimeout):
        return "ReadTimeout: the server sent nothing within the read timeout"
    return f"{type(error).__name__}: {error or 'no detail'}"


def _server_date(response: httpx.Response) -> datetime | None:
    try:
        moment = parsedate_to_datetime(response.headers["date"])
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _query(params: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not params:
        return None
    return {name: _query_value(value) for name, value in params.items() if value is not None}


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set)):
        return ",".join(str(v) for v in value)
    return str(value)


def _loggable(path: str, params: Mapping[str, Any] | None) -> str:
    page = (params or {}).get("page")
    return f"{path}?page={page}" if page is not None else path


def _error_fields(response: httpx.Response) -> tuple[str | None, str | None, Any]:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None, None, None
    if not isinstance(error, dict):
        return None, None, None
    return error.get("code"), error.get("message"), error.get("details")


def _required_scope(message: str | None, details: Any) -> str | None:
    if isinstance(details, dict):
        for key in ("required_scope", "scope", "missing_scope"):
            if isinstance(details.get(key), str):
                return details[key]
    for scope in SCOPES:
        if message and scope in message:
            return scope
    return None


def _is_sort_rejection(error: ApiError) -> bool:
    if error.status_code != 400:
        return False
    field = error.details.get("field") if isinstance(error.details, dict) else None
    if field in ("sort", "order"):
        return True
    return "sort" in str(error).lower()
