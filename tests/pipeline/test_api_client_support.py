"""Support for the API client tests (no tests here): change the service's data through its own store functions."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from resources.commops_api import ApiClient, ListSource, Walk

_names = itertools.count(1)


def add_kols(service: Any, count: int, *, hours_ago: float = 0) -> list[str]:
    """Create `count` active KOLs through the service's store (as the API would); returns their ids.

    With `hours_ago`, their created_at/updated_at are moved that far back: data that existed well before
    a walk (a walk cannot tell a row created a second before it from one created during it)."""
    from service.store import db, kols

    conn = service.connect()
    try:
        with db.transaction(conn):
            ids = [
                kols.create_kol(conn, service.org_id, {"full_name": f"Dr. Test {next(_names)}", "specialties": ["cardiology"]}, None)["id"]
                for _ in range(count)
            ]
            if hours_ago:
                _move_back(conn, ids, hours_ago)
            return ids
    finally:
        conn.close()


def _move_back(conn: Any, kol_ids: list[str], hours: float) -> None:
    from service.store.db import to_iso

    def back(value: str) -> str:
        return to_iso(datetime.fromisoformat(value.replace("Z", "+00:00")) - timedelta(hours=hours))

    for kol_id in kol_ids:
        created, updated = conn.execute("SELECT created_at, updated_at FROM kols WHERE id = ?", (kol_id,)).fetchone()
        conn.execute("UPDATE kols SET created_at = ?, updated_at = ? WHERE id = ?", (back(created), back(updated), kol_id))


def archive_kols(service: Any, kol_ids: list[str]) -> None:
    from service.store import db, kols

    conn = service.connect()
    try:
        with db.transaction(conn):
            for kol_id in kol_ids:
                kols.archive_kol(conn, service.org_id, kol_id)
    finally:
        conn.close()


def swap_kols(service: Any, archive_ids: list[str], create_count: int) -> list[str]:
    """Archive some KOLs and create as many others in ONE transaction: the list total does not move."""
    from service.store import db, kols

    conn = service.connect()
    try:
        with db.transaction(conn):
            for kol_id in archive_ids:
                kols.archive_kol(conn, service.org_id, kol_id)
            return [
                kols.create_kol(conn, service.org_id, {"full_name": f"Dr. Swap {next(_names)}", "specialties": ["oncology"]}, None)["id"]
                for _ in range(create_count)
            ]
    finally:
        conn.close()


def active_kol_ids(service: Any) -> set[str]:
    conn = service.connect()
    try:
        rows = conn.execute("SELECT id FROM kols WHERE org_id = ? AND is_archived = 0", (service.org_id,))
        return {row[0] for row in rows}
    finally:
        conn.close()


def table_ids(service: Any, table: str) -> set[str]:
    conn = service.connect()
    try:
        return {row[0] for row in conn.execute(f"SELECT id FROM {table} WHERE org_id = ?", (service.org_id,))}
    finally:
        conn.close()


def client_for(service: Any, **options: Any) -> ApiClient:
    options.setdefault("backoff_initial", 0.05)
    options.setdefault("backoff_max", 0.5)
    options.setdefault("timeout", 10.0)
    return ApiClient(service.base_url, service.api_key, **options)


def collect(client: ApiClient, path: str, params: dict | None = None, **options: Any) -> list[str]:
    """Every id a walk yields, in order (duplicates kept, so tests can see them)."""
    return [item["id"] for page in client.walk(path, params, **options).pages() for item in page.items]


def walk_ids(client: ApiClient, path: str, params: dict | None = None, **options: Any) -> tuple[list[str], Walk]:
    """(every id a walk yields, in order, duplicates kept; the finished walk, for its report)."""
    walk = client.walk(path, params, **options)
    return [item["id"] for page in walk.pages() for item in page.items], walk


ACTIVE, ARCHIVED = "active", "archived"
KOL_LISTS = [ListSource(ACTIVE, {"is_archived": "false"}, drains_into=ARCHIVED), ListSource(ARCHIVED, {"is_archived": "true"})]


def kol_listing(client: ApiClient, progress: Any = None) -> tuple[dict[str, list[str]], Any]:
    """Both KOL lists, as the nightly sync pages them: ({list: ids yielded, in order}, the finished listing).
    `progress(pages_done, pages_expected)` is called for the active list's pages."""
    listing = client.listing("/kols", KOL_LISTS, lookup_path="/kols/{id}",
                             progress=lambda label: progress if label == ACTIVE else None)
    ids: dict[str, list[str]] = {ACTIVE: [], ARCHIVED: []}
    for source, page in listing.pages():
        ids[source.label].extend(item["id"] for item in page.items)
    return ids, listing
