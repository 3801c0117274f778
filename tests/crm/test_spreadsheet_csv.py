"""Text a spreadsheet would run as a formula (=, +, -, @, tab, carriage return first) reaches the CSVs
people open only with a leading ': KOLs created through the service's API and contacts in the Salesforce
stand-in, through the reconciliation job, into the reconciliation and merge CSVs; numbers stay numbers;
the rejected pairs read back as they were given."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pyarrow as pa
import pytest

from crm import spreadsheet_csv
from crm.review import load_rejections, remember_rejection, rejections_path
from tests.crm.conftest import salesforce_env, start_standin
from tests.crm.support import reconcile_against
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import sync

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
HYPERLINK = '=HYPERLINK("http://evil.example/x","click")'
# KOLs created through the API; the namesake and the plain one have no email, so the probable-match pass
# pairs them: the namesake with the hostile contacts (candidates: only the name agrees), the plain one with its
# contact (a match_score).
HOSTILE_KOL = {"full_name": HYPERLINK, "specialties": ["cardiology"], "institution": "+Evil Institute",
               "title": "-Chief of Mischief", "notes": "@SUM(1,1)", "email": "hyperlink@evil.example",
               "phone": "+49 30 1234567"}
NAMESAKE_KOL = {"full_name": "=Mallory Evil", "specialties": ["oncology"], "institution": "@Other Clinic"}
PROBABLE_KOL = {"full_name": "Peter Plain", "specialties": ["oncology"], "institution": "Plain Hospital",
                "phone": "+1 617 555 0100", "department": "Oncology", "title": "Attending Physician",
                "location": {"city": "Boston", "state": "MA", "country": "US"}}
MALLORY = {"FirstName": "=Mallory", "LastName": "Evil", "Email": "=mallory@evil.example", "Phone": "+1 555 0199",
           "Account.Name": "@Evil Corp"}
# Contacts: the hostile KOL's (by its email); two of one hostile person (a duplicate set: the merge CSV);
# one with a hostile external id; the plain KOL's.
CONTACTS = {
    "hyperlink": {"FirstName": "+Hyper", "LastName": "Link", "Email": "hyperlink@evil.example", "Title": "-Chief"},
    "first": MALLORY,
    "second": MALLORY,
    "orphan": {"FirstName": "Oscar", "LastName": "Orphan", "Email": "oscar.orphan@example.org", "KOL_Id__c": "-1+1"},
    "plain": {"FirstName": "Peter", "LastName": "Plain", "Email": "peter.plain@example.org", "Phone": "+1 617 555 0100",
              "Account.Name": "Plain Hospital", "Department": "Oncology", "Title": "Attending Physician",
              "MailingCity": "Boston", "MailingState": "MA", "MailingCountry": "US"},
}


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path, dict[str, str], dict[str, str]]]:
    """A service whose KOLs include the hostile ones, created through its API and synced; a stand-in with CONTACTS.
    Yields the stand-in's SALESFORCE_* settings, the data directory, and the KOL and contact ids by name."""
    service = start_service(tmp_path / "service", kols=20, random_seed=11)
    try:
        headers = {"Authorization": f"Bearer {service.api_key}"}
        kol_ids = {}
        for body in (HOSTILE_KOL, NAMESAKE_KOL, PROBABLE_KOL):
            response = httpx.post(f"{service.base_url}/kols", headers=headers, json=body, timeout=30)
            assert response.status_code == 201, response.text
            kol_ids[body["full_name"]] = response.json()["data"]["id"]
        data_dir = tmp_path / "data"
        sync(service, data_dir)
    finally:
        service.server.stop()
    standin = start_standin(tmp_path / "salesforce")
    try:
        contact_ids = dict(zip(CONTACTS, standin.add_contacts(CONTACTS.values())))
        yield salesforce_env(standin), data_dir, kol_ids, contact_ids
    finally:
        standin.stop()


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def test_hostile_text_from_the_api_and_the_crm_is_written_as_text_in_every_report_csv(hostile):
    env, data_dir, kol_ids, contact_ids = hostile
    summary = reconcile_against(env, data_dir)
    reports = summary.report_csv.parent
    result, merge = summary.report_csv, summary.report_csv.with_name(summary.report_csv.stem + "-merge.csv")

    for path in (result, reports / "latest.csv", merge, reports / "latest-merge.csv"):
        for row in read(path):
            assert not [cell for cell in row.values() if cell.startswith(FORMULA_START)], (path.name, row)

    rows = read(result)
    by_kol = {row["kol_id"]: row for row in rows if row["kol_primary"] == "True"}
    by_contact = {row["crm_id"]: row for row in rows if row["crm_id"]}
    hyperlink = by_kol[kol_ids[HYPERLINK]]
    assert hyperlink["crm_id"] == contact_ids["hyperlink"] and hyperlink["status"] == "conflict"
    assert hyperlink["kol_name"] == "'" + HYPERLINK and hyperlink["crm_name"] == "'+Hyper Link"
    assert hyperlink["institution"] == "'+Evil Institute"
    mallory = by_contact[contact_ids["first"]]
    assert mallory["crm_name"] == by_contact[contact_ids["second"]]["crm_name"] == "'=Mallory Evil"
    assert mallory["crm_email"] == "'=mallory@evil.example"
    assert by_contact[contact_ids["orphan"]]["external_id"] == "'-1+1"
    namesake = by_kol[kol_ids["=Mallory Evil"]]
    assert namesake["kol_name"] == "'=Mallory Evil" and namesake["institution"] == "'@Other Clinic"
    assert namesake["status"] == "no_email" and namesake["candidates"].startswith("'=Mallory Evil (")
    plain = by_kol[kol_ids["Peter Plain"]]
    assert plain["status"] == "probable_match" and plain["crm_id"] == contact_ids["plain"]
    assert 0.9 <= float(plain["match_score"]) <= 1  # a number, no ' before it

    merged = read(merge)
    # the two are alike but for their modification times: either can be the master
    assert [{row["MasterRecordId"], row["DuplicateRecordId"]} for row in merged] == [
        {contact_ids["first"], contact_ids["second"]}]
    assert merged[0]["MasterName"] == merged[0]["DuplicateName"] == "'=Mallory Evil"
    assert merged[0]["MasterEmail"] == merged[0]["DuplicateEmail"] == "'=mallory@evil.example"


def test_numeric_and_boolean_columns_keep_their_values_and_only_text_is_prefixed(tmp_path):
    path = tmp_path / "out.csv"
    conn = duckdb.connect()
    header = ["score", "delta", "flag", "text", "phone", "plain", "empty", "quoted", "apostrophe"]
    count = spreadsheet_csv.write(conn, """
SELECT * FROM (VALUES (-1.5::DOUBLE, -3, false, '-3', '+49 30 1234', 'plain', NULL::VARCHAR, '''=x', '''kept')) t""",
                                  header, path)
    assert count == 1
    # Numeric columns as they are, negative ones too; '+49 30 1234 is the phone as text, not a sum.
    assert read(path) == [{"score": "-1.5", "delta": "-3", "flag": "False", "text": "'-3", "phone": "'+49 30 1234",
                           "plain": "plain", "empty": "", "quoted": "''=x", "apostrophe": "'kept"}]


def test_a_csv_is_what_csv_writer_writes_of_the_neutralised_values_byte_for_byte(tmp_path):
    texts = ["plain", "", None, "a,b", 'say "hi"', "two\nlines", "cr\rin", "=1+1", "+49 30 1234", "-3", "@SUM(A1)",
             "\tcmd", "\rcmd", "'=x", "''@y", "'kept", "Zoë Müller-Łukasz", "x=1", "e-mail@example.org", '="a,b"']
    numbers = [0.95, -1.5, 1e-05, None, 3.0, 1e16, 0.1 + 0.2, None, 7.0, -0.0, 123456.789, 2.5e-300, 1.0, 0.5, 0.25,
               None, 42.0, 0.9, 1e22, -7.25]
    flags = [True, False, None] * 6 + [True, False]
    table = pa.table({"text": texts, "number": numbers, "flag": flags, "id": [f"kol_{i:03d}" for i in range(20)],
                      "count": list(range(-3, 17)), "empty": pa.nulls(20)})
    conn = duckdb.connect()
    conn.register("given", table)
    conn.execute("CREATE TABLE cells AS SELECT * FROM given")
    path = tmp_path / "out.csv"
    assert spreadsheet_csv.write(conn, "SELECT * FROM cells", table.column_names, path) == 20

    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\r\n")
    writer.writerow(table.column_names)
    writer.writerows(spreadsheet_csv.rows(spreadsheet_csv.neutralise(table)))
    assert path.read_bytes() == b"\xef\xbb\xbf" + expected.getvalue().encode("utf-8")
    assert read(path)[7]["text"] == "'=1+1" and read(path)[3]["text"] == "a,b"


def test_restore_gives_back_every_value_neutralise_was_given():
    values = ["=1+1", "+49 30 1234", "-", "@SUM(A1)", "\tcmd", "\rcmd", "'=x", "''@y", "'kept", "plain", "", None]
    table = pa.table({"text": pa.array(values, pa.string()), "large": pa.array(values, pa.large_string()),
                      "number": pa.array([-float(i) for i in range(len(values))])})
    written = spreadsheet_csv.neutralise(table)
    assert written.column("text").to_pylist() == [
        "'=1+1", "'+49 30 1234", "'-", "'@SUM(A1)", "'\tcmd", "'\rcmd", "''=x", "'''@y", "'kept", "plain", "", None]
    assert written.column("large") == written.column("text").cast(pa.large_string())
    assert written.column("number") == table.column("number")
    assert spreadsheet_csv.restore(written) == table


def test_rejected_pairs_are_written_as_text_and_read_back_as_given(tmp_path):
    pairs = [("=HYPERLINK(\"http://evil.example/x\")", "+003000000000001AAA"), ("kol_0001", "'=quoted")]
    for kol_id, crm_id in pairs:
        assert remember_rejection(tmp_path, kol_id, crm_id)
    written = read(rejections_path(tmp_path))
    assert [(row["kol_id"], row["crm_id"]) for row in written] == [
        ("'=HYPERLINK(\"http://evil.example/x\")", "'+003000000000001AAA"), ("kol_0001", "''=quoted")]
    assert list(zip(*load_rejections(tmp_path).to_pydict().values())) == pairs
    assert not remember_rejection(tmp_path, *pairs[0])  # known again after the round trip
