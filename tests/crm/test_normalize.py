"""The comparison keys: Python reference functions and the DuckDB macros agree, NULLs stay NULL."""

from __future__ import annotations

import duckdb
import pytest

from crm import normalize

EMAILS = [("  Anna.Smith@Example.ORG ", "anna.smith@example.org"), ("STRASSE@x.de", "strasse@x.de"),
          ("straße@x.de", "strasse@x.de"), ("ＡＢＣ@x.de", "abc@x.de"), ("   ", None), (None, None)]
TEXTS = [("  Chief   of\tCardiology ", "chief of cardiology"), ("José Müller", "jose muller"),
         ("JOSE MULLER", "jose muller"), ("Straße", "strasse"), ("", None), (None, None)]
PHONES = [("+1 (555) 010-2345", "5550102345"), ("555.010.2345", "5550102345"), ("(555) 010-2345", "5550102345"),
          ("0049 30 1234567", "301234567"), ("+49 30 1234567", "301234567"), ("030 1234567", "301234567"),
          ("+44 20 7946 0018", "2079460018"), ("n/a", None), (None, None)]
COUNTRIES = [("US", "US"), ("usa", "US"), ("United States", "US"), ("United States of America", "US"),
             ("Deutschland", "DE"), ("Germany", "DE"), ("DEU", "DE"), ("UK", "GB"), ("United Kingdom", "GB"),
             ("España", "ES"), (" france ", "FR"), ("Narnia", "narnia"), (None, None)]


@pytest.fixture(scope="module")
def conn() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    normalize.register(connection)
    return connection


def key(conn: duckdb.DuckDBPyConnection, macro: str, value: str | None) -> str | None:
    return conn.execute(f"SELECT {macro}(?::VARCHAR)", [value]).fetchone()[0]


@pytest.mark.parametrize(("raw", "expected"), EMAILS)
def test_email(conn, raw, expected):
    assert normalize.normalize_email(raw) == expected
    assert key(conn, "crm_email", raw) == expected


@pytest.mark.parametrize(("raw", "expected"), TEXTS)
def test_text(conn, raw, expected):
    assert normalize.normalize_text(raw) == expected
    assert key(conn, "crm_text", raw) == expected


@pytest.mark.parametrize(("raw", "expected"), PHONES)
def test_phone(conn, raw, expected):
    assert normalize.normalize_phone(raw) == expected
    assert key(conn, "crm_phone_national", raw) == expected


@pytest.mark.parametrize(("raw", "expected"), COUNTRIES)
def test_country(conn, raw, expected):
    assert normalize.normalize_country(raw) == expected
    assert key(conn, "crm_country", raw) == expected


@pytest.mark.parametrize(("a", "b", "same"), [
    ("+1 (555) 010-2345", "555.010.2345", True), ("1 555 010 2345", "555-010-2345", True),
    ("+1 555 010 2345", "+1 555 010 2346", False), ("+49 30 1234567", "030 1234567", True),
    (None, None, True), ("555 0102", None, False),
])
def test_same_phone(conn, a, b, same):
    assert normalize.same_phone(a, b) is same
    assert conn.execute("SELECT crm_same_phone(crm_phone_national(?::VARCHAR), crm_phone_national(?::VARCHAR))",
                        [a, b]).fetchone()[0] is same


def test_name_reads_punctuation_as_spaces(conn):
    assert key(conn, "crm_name", "Dr. A. Smith") == key(conn, "crm_name", "dr a smith") == "dr a smith"


def test_bulk_email_key_matches_the_reference(conn):
    """The SQL-only bulk key plus the non-ASCII fix-up equals crm_email row for row."""
    conn.execute("CREATE OR REPLACE TEMP TABLE e AS SELECT unnest(?::VARCHAR[]) AS raw", [[e for e, _ in EMAILS]])
    conn.execute("CREATE OR REPLACE TEMP TABLE e2 AS SELECT raw, crm_email_ascii(raw) AS k FROM e")
    normalize.fold_emails(conn, "e2", "raw", "k")
    assert conn.execute("SELECT count(*) FROM e2 WHERE k IS DISTINCT FROM crm_email(raw)").fetchone()[0] == 0
