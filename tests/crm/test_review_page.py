"""The review page in a real browser (Selenium, Debian's headless chromium), against the Salesforce stand-in:
what a CRM admin does there lands in Salesforce and in the audit exactly as the commands' do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from crm.review_page.access import COOKIE
from crm.review_page.settings import local_user
from tests.crm.review_browser import require, start_chrome
from tests.crm.review_support import ORG, ReviewOrg, review_org
from tests.crm.support import rows

pytestmark = pytest.mark.timeout(240)


@dataclass
class Review:
    org: ReviewOrg
    browser: object

    def open(self, path: str):
        self.browser.get(self.org.page.url + path)
        return self.browser

    def css(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.browser.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.browser.find_elements(By.CSS_SELECTOR, selector)

    def submit(self, button) -> None:
        """Click a button that posts its form, and wait for the page it leads to."""
        with self.leaving_page():
            button.click()

    @contextmanager
    def leaving_page(self) -> Iterator[None]:
        """Wait, after the block, until the browser has left the page and loaded the next: chromium-driver's click
        (and a script's form.submit()) can return before a slow post's navigation has begun."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        page = self.css("html")

        def left(_browser) -> bool:
            try:
                page.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as error:  # chromium-driver's word for the same, mid-navigation
                if "does not belong to the document" in str(error):
                    return True
                raise
            return False

        yield
        WebDriverWait(self.browser, 60).until(left)
        WebDriverWait(self.browser, 60).until(
            lambda browser: browser.execute_script("return document.readyState") == "complete")

    def flashes(self, kind: str) -> list[str]:
        return [element.text for element in self.all(f".flash.{kind}")]


@pytest.fixture(scope="module")
def review(synced, tmp_path_factory) -> Iterator[Review]:
    found = require()
    _, synced_data = synced
    directory = tmp_path_factory.mktemp("review")
    with review_org(synced_data, directory) as org:
        browser = start_chrome(directory / "chromium-profile", binaries_found=found)
        try:
            browser.get(org.page.login_url)  # the launch's token: a session cookie, then the summary
            yield Review(org, browser)
        finally:
            browser.quit()


def test_confirm_one_probable_match_and_reject_two_at_once_the_next_reconcile_honours_all_three(review):
    org = review.org
    kept, (refused_1, refused_2) = org.planted["nickname"], (org.planted["moved"], org.planted["typo"])
    review.open(f"/o/{ORG}/matches")
    review.submit(review.css(f'button[name=one][value="confirm|{kept[0]}|{kept[1]}"]'))
    assert review.flashes("ok") == ["1 pair confirmed (the contact carries the KOL id in Salesforce); audited."]
    for kol_id, crm_id in (refused_1, refused_2):
        review.css(f'input[name=pair][value="{kol_id}|{crm_id}"]').click()
    review.submit(review.css("#reject-selected"))
    assert review.flashes("ok") == ["2 pairs rejected (never proposed again); audited."]
    verdicts = {a.get_attribute("id"): a.find_element("css selector", ".verdict").text.partition(",")[0]
                for a in review.all("article.decided")}  # shown as decided until the next reconciliation
    assert verdicts == {f"pair-{kept[0]}-{kept[1]}": f"confirmed by {local_user()}",
                        **{f"pair-{k}-{c}": f"rejected by {local_user()}" for k, c in (refused_1, refused_2)}}

    assert org.external_ids()[kept[1]] == kept[0]
    decided = org.audit("action IN ('confirm', 'reject')")
    assert {(a, m, u, k, c) for a, m, u, k, c, *_ in decided} == {
        ("confirm", "applied", local_user(), *kept), ("reject", "recorded", local_user(), *refused_1),
        ("reject", "recorded", local_user(), *refused_2)}

    again = org.reconcile()
    status = {(k, c): s for k, c, s in rows(org.data_dir / "analytics.duckdb",
                                            "SELECT kol_id, crm_id, status FROM kol_crm_reconciliation")}
    assert status[kept] in ("matched", "conflict")  # paired by the external id now
    for kol_id, crm_id in (refused_1, refused_2):
        assert (kol_id, crm_id) not in status and status[(None, crm_id)] == "crm_only"
    assert again.counts["probable_match"] == len(org.planted) - 3


def test_approve_two_of_five_planned_changes_apply_them_then_undo_one(review):
    org = review.org
    before = org.titles()
    review.open(f"/o/{ORG}/plan?status=update&field=title")
    planned = review.all("tr.planned")
    assert len(planned) == len(org.retitled)
    keys = [row.get_attribute("data-key") for row in planned[:2]]
    for key in keys:
        review.submit(review.css(f'button[name=row][value="approve|{key}"]'))
    assert [row.get_attribute("class") for row in review.all("tr.planned")][:2] == ["planned approve"] * 2
    review.submit(review.css("#apply-approved"))

    outcome = [[cell.text for cell in row.find_elements("css selector", "td")] for row in review.all("table.outcome tbody tr")]
    assert [cells[0] for cells in outcome] == ["applied", "applied"]
    changed = {cells[3]: cells[6] for cells in outcome}  # contact: what Salesforce holds, read back
    assert changed == {crm: org.retitled[crm][1] for crm in changed}
    after = org.titles()
    assert {crm for crm in org.retitled if after[crm] != before[crm]} == set(changed)  # exactly those two
    assert {crm: after[crm] for crm in changed} == {crm: org.retitled[crm][1] for crm in changed}
    applied = org.audit("action = 'update' AND mode = 'applied'")
    assert sorted((u, c, f, old, new, held) for _, _, u, _, c, f, old, new, held, _ in applied) == sorted(
        (local_user(), crm, "title", org.retitled[crm][0], org.retitled[crm][1], org.retitled[crm][1]) for crm in changed)

    undone = sorted(changed)[0]
    review.open(f"/o/{ORG}/audit?action=update")
    row = next(r for r in review.all("table.audit tbody tr") if undone in r.text)
    audit_id = row.get_attribute("id").removeprefix("audit-")
    review.submit(row.find_element("css selector", "button.undo"))
    assert review.flashes("ok") == [f"Undone: title of contact {undone} is {org.retitled[undone][0]!r} again (read back; audited)."]
    assert org.titles()[undone] == org.retitled[undone][0]
    assert [(a, m, u, c, old, new, held, of) for a, m, u, _, c, _, old, new, held, of in org.audit("action = 'undo'")] == [
        ("undo", "applied", local_user(), undone, org.retitled[undone][1], org.retitled[undone][0],
         org.retitled[undone][0], audit_id)]


def test_a_decisions_csv_with_a_bad_row_takes_the_good_rows_and_names_the_bad_one(review, tmp_path):
    org = review.org
    confirmed, rejected, other = org.planted["initial"], org.planted["swapped"], org.planted["double_surname"]
    upload = tmp_path / "decisions.csv"
    upload.write_bytes("\ufeffkol_id;crm_id;decision\r\n"  # as Excel saves it where the list separator is ;
                       f"{confirmed[0]};{confirmed[1]};Confirm\r\n{rejected[0]};{rejected[1]};reject\r\n"
                       f"kol_nobody;{other[1]};confirm\r\n".encode())
    review.open(f"/o/{ORG}/decisions")
    review.css("input[type=file]").send_keys(str(upload))
    review.submit(review.css("#upload"))

    report = [[cell.text for cell in row.find_elements("css selector", "td")] for row in review.all("table.report tbody tr")]
    assert [(line, taken) for line, _, _, _, taken, _ in report] == [("2", "taken"), ("3", "taken"), ("4", "refused")]
    assert "kol_nobody" in report[2][5] and "not an active KOL" in report[2][5]
    assert org.external_ids()[confirmed[1]] == confirmed[0]
    assert org.external_ids()[other[1]] is None  # the bad row changed nothing
    assert {(a, k) for a, _, _, k, *_ in org.audit(f"kol_id IN ('{confirmed[0]}', '{rejected[0]}', 'kol_nobody')")} == {
        ("confirm", confirmed[0]), ("reject", rejected[0])}


def test_a_forged_post_without_the_csrf_token_is_refused_and_changes_nothing(review):
    org = review.org
    kol_id, crm_id = org.planted["local_phone"]
    audit_before = org.audit()
    review.open(f"/o/{ORG}/matches")
    # a form built by a script of another page: it cannot read the CSRF token, so it posts without one
    with review.leaving_page():
        review.browser.execute_script(
            "const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];"
            "const b = document.createElement('input'); b.name = 'one'; b.value = arguments[1]; f.appendChild(b);"
            "document.body.appendChild(f); f.submit();", f"/o/{ORG}/matches", f"confirm|{kol_id}|{crm_id}")
    assert review.css("h1").text == "Refused"
    assert "CSRF token is missing or wrong" in review.css("p.message").text
    cookie = review.browser.get_cookie(COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    forged = httpx.post(f"{org.page.url}/o/{ORG}/matches", cookies={COOKIE: cookie["value"]},
                        data={"one": f"confirm|{kol_id}|{crm_id}", "csrf": "guessed"})
    assert forged.status_code == 403
    assert org.external_ids()[crm_id] is None and org.audit() == audit_before


def _words_broken(review, selector: str) -> list[str]:
    """Words of the cells matched that the browser laid out on more than one line."""
    return review.browser.execute_script("""
const broken = [];
for (const cell of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index); range.setEnd(node, match.index + match[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (lines.size > 1) broken.push(match[0]);
    }
  }
}
return broken;""", selector)


def test_differences_keep_their_words_whole_at_1280_px_and_the_page_uses_1920_px(review):
    try:
        review.browser.set_window_size(1280, 900)
        for path in (f"/o/{ORG}/rows?status=conflict", f"/o/{ORG}/plan"):
            review.open(path)
            assert review.all("td.differences"), path
            assert _words_broken(review, "td.differences") == [], path
        review.browser.set_window_size(1920, 1000)
        review.open(f"/o/{ORG}/plan")
        width = review.browser.execute_script("return document.documentElement.clientWidth")
        assert review.css("table.plan").rect["width"] >= 0.95 * width - 40  # the page's padding only
        review.open(f"/o/{ORG}/matches")
        tops = {round(card.rect["y"]) for card in review.all("article.pair")[:2]}
        assert len(tops) == 1  # two pairs side by side where the screen is wide
    finally:
        review.browser.set_window_size(1280, 1000)


def test_every_answer_carries_the_content_security_policy(review):
    answer = httpx.get(review.org.page.url + "/login?token=wrong")
    assert answer.status_code == 401
    assert re.search(r"script-src 'self'", answer.headers["content-security-policy"])
    assert "unsafe-inline" not in answer.headers["content-security-policy"]
