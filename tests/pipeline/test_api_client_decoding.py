"""A listing with decoders reads pages as Arrow in groups: every row once, unknown fields kept, broken bodies
fetched again. The service sits behind a loopback proxy that alters chosen list pages on their way out."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import httpx
import pyarrow as pa
import pytest

from sync.catalog import KOLS
from sync.records import RecordConverter
from sync.schemas import EXTRA_COLUMN

from .test_api_client_support import add_kols, client_for

Alter = Callable[[int, bytes], bytes]  # (page number, body) -> the body sent instead


@contextmanager
def altering_proxy(service, alter: Alter) -> Iterator[SimpleNamespace]:
    """A proxy to `service` on a free loopback port: the body of each page of the active KOL list passes
    through `alter`; every other response passes unchanged. `.requests` counts the active list's pages."""
    upstream = httpx.Client(base_url=service.base_url, timeout=10)
    requests: dict[int, int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reply = upstream.get(self.path.lstrip("/"), headers={"Authorization": self.headers["Authorization"]})
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            body = reply.content
            if url.path == "/kols" and query.get("is_archived") == ["false"] and reply.status_code == 200:
                number = int(query["page"][0])
                with lock:
                    requests[number] = requests.get(number, 0) + 1
                    body = alter(number, body) if requests[number] == 1 else body  # a fetch again gets the truth
            self.send_response(reply.status_code)
            for name in ("content-type", "date"):
                if name in reply.headers:
                    self.send_header(name, reply.headers[name])
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(base_url=f"http://127.0.0.1:{server.server_address[1]}", api_key=service.api_key,
                              requests=requests)
    finally:
        server.shutdown()
        server.server_close()
        upstream.close()


def _decoded_listing(target) -> tuple[pa.Table, list]:
    """Both KOL lists paged as the nightly sync pages them (decoders on): (the active list's rows, its pages)."""
    sources = KOLS.list_sources()
    converters = {s.label: RecordConverter(KOLS.schema, defaults=d) for s, d in zip(sources, KOLS.walk_defaults)}
    with client_for(target, max_concurrency=4) as client:
        listing = client.listing("/kols", sources, lookup_path="/kols/{id}",
                                 decoders={label: c.decode_pages for label, c in converters.items()})
        pages = [page for source, page in listing.pages() if source == sources[0]]
        assert listing.report.complete
    converter = converters[sources[0].label]
    batches = [page.batch if page.batch is not None else converter.to_batch(page.items) for page in pages]
    return pa.Table.from_batches(batches, schema=KOLS.schema), pages


def _with_unknown_field(page: int) -> Alter:
    def alter(number: int, body: bytes) -> bytes:
        if number != page:
            return body
        envelope = json.loads(body)
        envelope["data"][7]["x_new_field"] = {"since": "v2"}
        return json.dumps(envelope).encode()

    return alter


def test_a_page_with_an_unknown_field_among_clean_ones_keeps_it_and_the_others_stay_columnar(make_service):
    service = make_service()
    created = add_kols(service, 1200, hours_ago=1)
    with altering_proxy(service, _with_unknown_field(page=5)) as proxy:
        rows, pages = _decoded_listing(proxy)

    assert rows.column("id").to_pylist() == created  # every row once, in the list's order
    extra = dict(zip(rows.column("id").to_pylist(), rows.column(EXTRA_COLUMN).to_pylist()))
    drifted = created[4 * 100 + 7]
    assert json.loads(extra.pop(drifted)) == {"x_new_field": {"since": "v2"}}
    assert set(extra.values()) == {None}
    # Only the altered page was read as dicts: its neighbours, decoded in the same group, stay Arrow batches
    assert [page.number for page in pages if page.batch is None] == [5]
    assert len(pages) == 12


def test_a_list_page_whose_body_is_not_json_is_fetched_again_and_nothing_is_lost(make_service, caplog):
    service = make_service()
    created = add_kols(service, 1200, hours_ago=1)
    broken: Alter = lambda number, body: body[: len(body) // 2] if number == 6 else body  # noqa: E731
    with altering_proxy(service, broken) as proxy, caplog.at_level(logging.WARNING, logger="commops.api"):
        rows, _ = _decoded_listing(proxy)
        requests = dict(proxy.requests)

    assert rows.column("id").to_pylist() == created
    assert requests == {number: 2 if number == 6 else 1 for number in range(1, 13)}
    assert "/kols page 6: invalid JSON body" in caplog.text


@pytest.mark.parametrize("pages", [1, 3, 8])
def test_pages_decoded_together_equal_pages_decoded_alone_and_as_dicts(make_service, pages):
    service = make_service()
    add_kols(service, 100 * pages - 30, hours_ago=1)
    converter = RecordConverter(KOLS.schema, defaults={"is_archived": False})
    with httpx.Client(base_url=service.base_url, headers={"Authorization": f"Bearer {service.api_key}"}) as http:
        bodies = [http.get("/kols", params={"page": n, "per_page": 100, "sort": "created_at", "order": "asc",
                                                "is_archived": "false"}).content for n in range(1, pages + 1)]

    together = converter.decode_pages(bodies)
    alone = [converter.decode_pages([body])[0] for body in bodies]
    as_dicts = [converter.to_batch(json.loads(body)["data"]) for body in bodies]
    assert together is not None
    assert [batch.num_rows for batch, _ in together] == [100] * (pages - 1) + [70]
    for (batch, meta), (alone_batch, alone_meta), dict_batch in zip(together, alone, as_dicts, strict=True):
        assert meta == alone_meta and meta["total"] == 100 * pages - 30
        assert batch.equals(alone_batch)
        assert batch.equals(dict_batch)
    if pages > 1:  # one page that will not decode sends the whole group back, to be decoded page by page
        assert converter.decode_pages([*bodies[:-1], b'{"data": [{"id": 1}], "meta": {"total": 1}}']) is None
