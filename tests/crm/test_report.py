"""The per-run CSV (Excel-friendly, readable by csv and DuckDB) and the HTML page as a browser shows it."""

from __future__ import annotations

import csv
import re
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from assets.crm.reconcile import reconcile
from assets.crm.report import markdown_summary, write_reports
from assets.crm.tables import RESULT_TABLE, STATUSES
from tests.crm import browser
from tests.crm.support import load, planted


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[duckdb.DuckDBPyConnection, Path, Path, dict[str, int]]:
    kols, contacts, _ = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="2026-11-23T10:00:00Z/a")
    result = reconcile(conn, "kols", "contacts", run_id="2026-11-23T11:00:00Z/b")
    directory = tmp_path_factory.mktemp("reports")
    csv_path, html_path = write_reports(conn, directory, rows_per_status=20)
    return conn, csv_path, html_path, result.counts


def test_csv_is_excel_friendly_and_complete(reported):
    conn, csv_path, _, counts = reported
    raw = csv_path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    assert raw.count(b"\r\n") >= sum(counts.values()) + 1 and b"\n" not in raw.replace(b"\r\n", b"")
    with csv_path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == sum(counts.values())
    assert {s: sum(r["status"] == s for r in rows) for s in STATUSES} == counts
    conflict = next(r for r in rows if r["status"] == "conflict" and r["differences"].startswith("title"))
    assert re.fullmatch(r'title: "[^"]+" ≠ "Head of [^"]+"', conflict["differences"])
    by_duckdb = dict(conn.execute(f"SELECT status, count(*) FROM read_csv('{csv_path}', header = true, all_varchar = true) "
                                  "GROUP BY 1").fetchall())
    assert by_duckdb == {s: n for s, n in counts.items() if n}
    assert (csv_path.parent / "latest.csv").read_bytes() == raw
    summary = markdown_summary(conn)
    assert f"| conflict | {counts['conflict']} |" in summary and str(csv_path.with_suffix(".html")) in summary


class Rows(HTMLParser):
    """Summary counts and the visible/hidden result rows of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.visible: list[str] = []
        self.hidden = 0
        self._count_status: str | None = None
        self._row: list[str] | None = None
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "td" and attributes.get("class") == "count":
            self._count_status = attributes["data-status"]
        if tag == "tr" and attributes.get("class") == "row":
            if "hidden" in attributes:
                self.hidden += 1
            else:
                self._row, self._depth = [], 0
        if tag == "tr" and self._row is not None:
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            self._depth -= 1
            if self._depth == 0:
                self.visible.append(" ".join(self._row))
                self._row = None

    def handle_data(self, data):
        if self._count_status:
            self.counts[self._count_status] = int(data.strip())
            self._count_status = None
        if self._row is not None:
            self._row.append(data)


def test_html_in_a_browser(reported, tmp_path):
    conn, _, html_path, counts = reported
    text = html_path.read_text(encoding="utf-8")
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    png = browser.screenshot(html_path.as_uri(), tmp_path / "report.png", tmp_path / "profile")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000

    page = Rows()
    page.feed(browser.dump_dom(html_path.as_uri(), tmp_path / "profile"))
    assert page.counts == counts
    shown = sum(min(n, 20) for n in counts.values())
    assert len(page.visible) == shown and page.hidden == 0
    assert "the CSV has all of them" in text  # matched (53) is cut at 20 rows

    filtered = Rows()
    filtered.feed(browser.dump_dom(html_path.as_uri() + "#q=Annex", tmp_path / "profile"))
    annex = conn.execute(f"SELECT count(*) FROM {RESULT_TABLE} WHERE differences::VARCHAR LIKE '%Annex%'").fetchone()[0]
    assert annex and len(filtered.visible) == annex and filtered.hidden == shown - annex
    assert all("annex" in row.lower() for row in filtered.visible)


def test_missing_chromium_fails_on_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        browser.chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        browser.chromium()
