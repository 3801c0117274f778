"""List paging remembers page boundaries and counts only while nothing was written."""

from __future__ import annotations

import pytest

from service.store import kols, orgs
from service.store.db import connect, init_db, transaction
from service.store.listing import Paging


@pytest.fixture
def org_with_kols(tmp_path):
    db = tmp_path / "listing.db"
    init_db(db)
    conn = connect(db)
    org = orgs.create_org(conn, "Org", "enterprise")
    with transaction(conn):
        for i in range(45):
            # equal names in pairs exercise the tie-break on id
            kols.create_kol(conn, org, {"full_name": f"Name {i // 2:02d}", "specialties": ["x"]}, None)
    yield db, conn, org
    conn.close()


def expected(conn, org, sort, order):
    rows = conn.execute(f"SELECT id FROM kols WHERE org_id = ? AND is_archived = 0 ORDER BY {sort} {order}, id {order}",
                        (org,))
    return [r[0] for r in rows]


@pytest.mark.parametrize("sort", ["created_at", "full_name"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_walking_pages_in_any_order_matches_offset_paging(org_with_kols, sort, order):
    _, conn, org = org_with_kols
    pages = {}
    for page in (1, 2, 3, 5, 4, 2, 1):  # forwards, a jump, backwards
        pages[page] = [k["id"] for k in kols.list_kols(conn, org, paging=Paging(page, 10, sort, order))[0]]
    walked = [kol_id for page in sorted(pages) for kol_id in pages[page]]
    assert walked == expected(conn, org, sort, order)


def test_a_write_from_another_connection_invalidates_remembered_pages_and_counts(org_with_kols):
    db, conn, org = org_with_kols
    for page in (1, 2, 3):
        kols.list_kols(conn, org, paging=Paging(page, 10, "full_name", "asc"))
    writer = connect(db)
    with transaction(writer):
        first = expected(conn, org, "full_name", "asc")[0]
        kols.archive_kol(writer, org, first)
        kols.create_kol(writer, org, {"full_name": "Zz Last", "specialties": ["x"]}, None)  # shifts every later page
    writer.close()
    items, total = kols.list_kols(conn, org, paging=Paging(4, 10, "full_name", "asc"))
    assert total == 45
    assert [k["id"] for k in items] == expected(conn, org, "full_name", "asc")[30:40]
