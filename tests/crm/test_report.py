"""The per-run CSV (Excel-friendly, readable by csv and DuckDB) and the HTML page as a browser shows it."""

from __future__ import annotations

import csv
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from crm.reconcile import DEFAULT_RULES, reconcile
from crm.writeback import plan_writeback, store_plan
from crm import spreadsheet_csv
from crm.report import PROBLEMS_FIRST, markdown_summary, write_reports
from crm.tables import RESULT_TABLE, STATUSES
from tests.crm import browser
from tests.crm.support import load, planted


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[duckdb.DuckDBPyConnection, Path, Path, dict[str, int]]:
    kols, contacts, _ = planted()
    for kol in kols:  # long words in the values compared: the layout must not cut them
        kol["title"] = kol["title"].replace("Chief of Cardiology", "Otorhinolaryngologist Interventionalcardiology")
    contacts = [{**c, "Title": (c.get("Title") or "").replace("Chief of Cardiology", "Otorhinolaryngologist "
                                                              "Interventionalcardiology") or None} for c in contacts]
    conn = duckdb.connect()
    load(conn, kols, contacts)
    # the first run lacks the last six contacts: the trend has changes to show
    conn.execute("CREATE TABLE fewer_contacts AS SELECT * FROM contacts ORDER BY crm_id LIMIT (SELECT count(*) - 6 FROM contacts)")
    reconcile(conn, "kols", "fewer_contacts", run_id="2026-11-23T10:00:00Z/a")
    result = reconcile(conn, "kols", "contacts", run_id="2026-11-23T11:00:00Z/b")
    store_plan(conn, DEFAULT_RULES, "kols", "default", "2026-11-23T11:00:00Z/b")
    directory = tmp_path_factory.mktemp("reports")
    csv_path, html_path = write_reports(conn, directory, rows_per_status=20,
                                        record_base_url="https://example.my.salesforce.com",
                                        review_url="https://review.example.org/crm")
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
    # what needs a person first, the matched rows last (a spreadsheet cuts a long file's tail)
    order = [r["status"] for r in rows]
    assert order == sorted(order, key=PROBLEMS_FIRST.index) and order[0] == "probable_match" and order[-1] == "matched"
    conflict = next(r for r in rows if r["status"] == "conflict" and r["differences"].startswith("title"))
    assert re.fullmatch(r'title: "[^"]+" ≠ "Head of [^"]+"', conflict["differences"])
    by_duckdb = dict(conn.execute(f"SELECT status, count(*) FROM read_csv('{csv_path}', header = true, all_varchar = true) "
                                  "GROUP BY 1").fetchall())
    assert by_duckdb == {s: n for s, n in counts.items() if n}
    assert (csv_path.parent / "latest.csv").read_bytes() == raw
    summary = markdown_summary(conn)
    assert f"| conflict | {counts['conflict']} |" in summary and str(csv_path.with_suffix(".html")) in summary
    probable = next(r for r in rows if r["status"] == "probable_match")
    assert float(probable["match_score"]) >= 0.96 and probable["match_reasons"].startswith("name first ")


def test_merge_csv_names_each_duplicate_with_its_master(reported):
    conn, csv_path, _, _ = reported
    merge = csv_path.with_name(csv_path.stem + "-merge.csv")
    with merge.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle))
    sets = dict(conn.execute(f"SELECT duplicate_set_id, count(*) FROM {RESULT_TABLE} WHERE duplicate_set_id IS NOT NULL "
                             "GROUP BY 1").fetchall())
    assert rows and len(rows) == sum(sets.values()) - len(sets)  # every contact of a set but its master
    masters = dict(conn.execute(f"SELECT crm_id, suggested_master FROM {RESULT_TABLE} WHERE duplicate_set_id IS NOT NULL").fetchall())
    assert all(masters[row["DuplicateRecordId"]] == row["MasterRecordId"] != row["DuplicateRecordId"] for row in rows)
    assert list(rows[0])[:2] == ["MasterRecordId", "DuplicateRecordId"] and rows[0]["MasterReason"]


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
    offline = re.sub(r'<a class="record" href="https://[^"]+"', "", text).replace('xmlns="http://www.w3.org/2000/svg"', "")
    offline = re.sub(r'<p id="review-link">.*?</p>', "", offline, flags=re.S)  # the review page's link
    assert "http://" not in offline and "https://" not in offline  # only links to the records, nothing loaded
    png = browser.screenshot(html_path.as_uri(), tmp_path / "report.png", tmp_path / "profile")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000

    page = Rows()
    page.feed(browser.dump_dom(html_path.as_uri(), tmp_path / "profile"))
    assert page.counts == counts
    sets = conn.execute(f"SELECT count(DISTINCT duplicate_set_id) FROM {RESULT_TABLE}").fetchone()[0]
    shown = sum(min(n, 20) for n in counts.values()) + min(sets, 20)
    assert len(page.visible) == shown and page.hidden == 0
    assert "the CSV has all of them" in text  # matched (53) is cut at 20 rows

    filtered = Rows()
    filtered.feed(browser.dump_dom(html_path.as_uri() + "#q=Annex", tmp_path / "profile"))
    annex = conn.execute(f"""SELECT count(*) FROM (SELECT *, row_number() OVER (PARTITION BY status ORDER BY kol_id NULLS LAST,
                             crm_id) AS n FROM {RESULT_TABLE}) WHERE n <= 20 AND differences_not_written::VARCHAR LIKE '%Annex%'"""
                         ).fetchone()[0]  # among the rows the page shows (20 a status)
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


def test_the_page_fits_1280_px_says_what_to_do_and_shows_probable_matches_side_by_side(reported, tmp_path):
    conn, _, html_path, counts = reported
    dom = browser.dump_dom(html_path.as_uri(), tmp_path / "profile", size="1280,900")
    widths = re.search(r'data-scroll-width="(\d+)" data-client-width="(\d+)"', dom)
    assert widths and int(widths[1]) <= int(widths[2]) <= 1280  # no horizontal scroll
    for status, count in counts.items():
        if count:
            assert re.search(rf'<p class="action" data-action="{status}">.+?</p>', dom), status
    probable = conn.execute(f"SELECT kol_id, crm_id, kol_name, crm_name FROM {RESULT_TABLE} "
                            "WHERE status = 'probable_match' ORDER BY match_score DESC, kol_id LIMIT 1").fetchall()[0]
    start = dom.index(f'<tr class="row" data-status="probable_match" data-kol="{probable[0]}" data-crm="{probable[1]}">')
    cells = dom[start:dom.find('<tr class="row"', start + 1)]  # the row: both records, the reasons, the commands
    assert probable[2] in cells and probable[3] in cells and "phone" in cells and "institution" in cells
    assert f"commops reconcile confirm {probable[0]} {probable[1]}" in cells
    assert f"https://example.my.salesforce.com/lightning/r/Contact/{probable[1]}/view" in cells
    plan = plan_writeback(conn, DEFAULT_RULES).to_pylist()
    creates = len({r["kol_id"] for r in plan if r["action"] == "create"})
    updates = sum(r["action"] == "update" for r in plan)
    assert f"would create {creates} contact" in dom and f"update {updates} field value" in dom
    assert dom.count('<tr><td>kol_') >= min(creates, 20)  # the creates listed
    assert f'<a href="https://review.example.org/crm/?org=default">' in dom  # the review page, where one is configured


def test_one_run_says_its_trend_starts_later_and_a_csv_crm_has_no_write_back(tmp_path):
    kols, contacts, _ = planted(seed=2, n=30)
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="only")
    _, html_path = write_reports(conn, tmp_path / "reports", writable=False)
    text = html_path.read_text(encoding="utf-8")
    assert 'id="trend"' not in text and "<svg" not in text  # a single run has no changes to show
    assert 'id="plan-readonly"' in text and "--apply would create" not in text
    assert "/lightning/r/Contact/" not in text


def test_the_page_shows_hostile_names_as_text(tmp_path):
    kols, contacts, _ = planted(seed=2, n=30)
    kols[0]["full_name"] = '<script>alert("kol")</script>'
    kols[1]["full_name"] = '=HYPERLINK("http://evil.example/x","click")'
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="only")
    _, html_path = write_reports(conn, tmp_path / "reports")
    text = html_path.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(&#34;kol&#34;)&lt;/script&gt;" in text and '<script>alert("kol")' not in text
    assert "=HYPERLINK(&#34;http://evil.example/x&#34;,&#34;click&#34;)" in text
    assert 'href="http://evil' not in text and '"http://evil' not in text


def test_the_page_puts_what_needs_a_person_first_and_collapses_the_matched_rows(reported, tmp_path):
    conn, _, html_path, counts = reported
    text = html_path.read_text(encoding="utf-8")
    probable, sets, matched = (text.index(anchor) for anchor in
                               ('id="status-probable_match"', 'id="duplicate-sets"', 'id="status-matched"'))
    assert probable < sets < matched
    assert '<a href="#duplicate-sets">' in text[:text.index("</table>")]  # linked from the summary
    assert re.search(r'<details class="collapsed" id="status-matched"><summary>matched \(\d+\)', text)
    assert "<details open" not in text
    differing = conn.execute(f"SELECT count(*) FROM {RESULT_TABLE} WHERE status = 'matched' AND "
                             "differences_not_written IS NOT NULL").fetchone()[0]
    assert differing and "differs in the CRM (not ours to write)" in text


def test_the_trend_says_what_changed_since_the_previous_run_per_status(reported):
    conn, _, html_path, counts = reported
    text = html_path.read_text(encoding="utf-8")
    before, after = conn.execute(f"SELECT {', '.join(STATUSES)} FROM reconciliation_runs ORDER BY reconciled_at").fetchall()
    changed = {status: b - a for status, a, b in zip(STATUSES, before, after) if b != a}
    assert changed
    for status, change in changed.items():
        row = re.search(rf'<tr data-status="{status}">.*?</tr>', text, re.S)[0]
        assert (f"▲ +{change}" if change > 0 else f"▼ −{-change}") in row and f">{counts[status]}<" in row
    unchanged = [s for s in STATUSES if s not in changed]
    assert re.search(r'id="trend-unchanged">Unchanged over these runs: ' + ", ".join(unchanged), text)


@pytest.mark.parametrize("width", [1280, 1920])
def test_differences_are_read_whole_at_1280_and_the_page_uses_1920(reported, tmp_path, width):
    _, _, html_path, _ = reported
    dom = browser.dump_dom(html_path.as_uri() + "#q=Interventionalcardiology", tmp_path / "profile", size=f"{width},1000")
    assert not re.search(r'data-differences-shown="0"', dom)  # differences with long words are on show
    measures = dict(re.findall(r'data-([a-z-]+)="(\d+)"', dom[:dom.index(">", dom.index("<html"))]))
    assert int(measures["scroll-width"]) <= int(measures["client-width"])  # nothing scrolls sideways
    assert measures["differences-overflowing"] == "0"  # no word spilling out of its cell
    assert measures["differences-words-broken"] == "0"  # and none split over two lines
    assert int(measures["body-width"]) >= width - 80  # the page takes the window's width


def test_whoever_has_a_latest_file_open_reads_it_whole_while_the_next_night_replaces_it(tmp_path):
    kols, contacts, _ = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="2026-11-24T10:00:00Z/a")
    store_plan(conn, DEFAULT_RULES, "kols", "default", "2026-11-24T10:00:00Z/a")
    write_reports(conn, tmp_path)
    names = ("latest.csv", "latest.html", "latest-merge.csv", "latest-plan.csv")
    before = {name: (tmp_path / name).read_bytes() for name in names}
    opened = {name: (tmp_path / name).open("rb") for name in names}  # downloads under way
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / f".latest.csv.{gone.pid}.0a1b2c3d.tmp").write_bytes(b"half a file")  # a night killed while writing
    conn.execute("DELETE FROM contacts WHERE crm_id IN (SELECT crm_id FROM contacts ORDER BY crm_id LIMIT 5)")
    reconcile(conn, "kols", "contacts", run_id="2026-11-24T11:00:00Z/b")
    store_plan(conn, DEFAULT_RULES, "kols", "default", "2026-11-24T11:00:00Z/b")
    csv_path, html_path = write_reports(conn, tmp_path)
    spreadsheet_csv.write(conn, "SELECT 'after' AS merge", ["merge"], tmp_path / "latest-merge.csv")  # an admin's choice
    for name, handle in opened.items():
        with handle:
            assert handle.read() == before[name], name
    assert (tmp_path / "latest.csv").read_bytes() == csv_path.read_bytes() != before["latest.csv"]
    assert (tmp_path / "latest.html").read_bytes() == html_path.read_bytes()
    assert (tmp_path / "latest-merge.csv").read_bytes().endswith(b"after\r\n")
    assert not [path.name for path in tmp_path.iterdir() if path.name.startswith(".")]  # no temporary file is left
