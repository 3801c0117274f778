"""Reconciliation statuses against planted discrepancies, the exactly-once invariant and the tables."""

from __future__ import annotations

import json
import re

import duckdb
import pytest

from crm.reconcile import DEFAULT_RULES, FieldRule, reconcile
from crm.tables import RESULT_TABLE, RUNS_TABLE, STATUSES
from tests.crm.support import load, make_kols, planted


@pytest.fixture(scope="module")
def reconciled() -> tuple[duckdb.DuckDBPyConnection, dict[str, str], list[dict]]:
    kols, contacts, expected = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", DEFAULT_RULES, run_id="run-1")
    return conn, expected, kols


def statuses(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Status per contact id and per KOL id (its counted row)."""
    found: dict[str, str] = {}
    for status, kol_id, primary, crm_id in conn.execute(
        f"SELECT status, kol_id, kol_primary, crm_id FROM {RESULT_TABLE}"
    ).fetchall():
        if crm_id:
            found[crm_id] = status
        if kol_id and primary:
            found[kol_id] = status
    return found


def test_every_planted_case_gets_its_status(reconciled):
    conn, expected, _ = reconciled
    found = statuses(conn)
    wrong = {key: (status, found.get(key)) for key, status in expected.items() if found.get(key) != status}
    assert not wrong
    assert set(expected.values()) >= set(STATUSES) - {"duplicate_in_kols"}


def test_every_kol_and_contact_exactly_once(reconciled):
    conn, _, kols = reconciled
    kol_rows = dict(conn.execute(f"SELECT kol_id, count(*) FROM {RESULT_TABLE} WHERE kol_primary GROUP BY 1").fetchall())
    assert kol_rows == {kol["id"]: 1 for kol in kols}
    contact_rows = conn.execute(f"SELECT crm_id, count(*) FROM {RESULT_TABLE} WHERE crm_id IS NOT NULL GROUP BY 1").fetchall()
    assert {n for _, n in contact_rows} == {1}
    assert len(contact_rows) == conn.execute("SELECT count(*) FROM contacts").fetchone()[0]
    # KOL ids on non-counted rows only where a KOL has several contacts.
    extra = conn.execute(f"SELECT DISTINCT status FROM {RESULT_TABLE} WHERE kol_id IS NOT NULL AND NOT kol_primary").fetchall()
    assert {s for s, in extra} <= {"duplicate_in_crm", "id_conflict", "orphan_in_crm"}


def test_conflict_differences_carry_raw_values(reconciled):
    conn, _, _ = reconciled
    rows = conn.execute(f"SELECT differences::VARCHAR FROM {RESULT_TABLE} WHERE status = 'conflict'").fetchall()
    fields = [d for row, in rows for d in json.loads(row)]
    assert {d["field"] for d in fields} == {"title", "phone"}  # fields write-back writes
    title = next(d for d in fields if d["field"] == "title")
    assert title["crm_value"] == "Head of " + title["kol_value"]
    assert conn.execute(f"SELECT count(*) FROM {RESULT_TABLE} WHERE status = 'matched' AND differences IS NOT NULL").fetchone()[0] == 0


def test_a_row_differing_only_in_fields_we_do_not_write_is_matched_and_says_so(reconciled):
    conn, expected, _ = reconciled
    rows = conn.execute(f"SELECT status, differences_not_written::VARCHAR FROM {RESULT_TABLE} "
                        "WHERE differences_not_written::VARCHAR LIKE '%Annex%'").fetchall()
    assert rows and {status for status, _ in rows} <= {"matched", "conflict"} and "matched" in {s for s, _ in rows}
    institution = [d for _, listed in rows for d in json.loads(listed) if d["field"] == "institution"]
    assert institution and all(d["crm_value"] == d["kol_value"] + " Annex" for d in institution)


def test_case_and_whitespace_emails_never_conflict():
    kols = make_kols(3)
    conn = duckdb.connect()
    contacts = [{"Id": f"003{i:015d}", "FirstName": k["full_name"].split()[0], "LastName": k["full_name"].split()[1],
                 "Email": f"  {k['email'].upper()} ", "Title": k["title"], "Phone": k["phone"], "Department": k["department"],
                 "Account.Name": k["institution"], "MailingCity": k["location"]["city"],
                 "MailingState": k["location"]["state"], "MailingCountry": k["location"]["country"]}
                for i, k in enumerate(kols)]
    load(conn, kols, contacts)
    result = reconcile(conn, "kols", "contacts", run_id="emails")
    assert result.counts["matched"] == 3


def test_a_kol_without_email_is_a_probable_match_of_its_contact_with_reasons(reconciled):
    conn, expected, kols = reconciled
    by_id = {kol["id"]: kol for kol in kols}
    rows = conn.execute(f"SELECT kol_id, crm_name, match_score, match_reasons::VARCHAR, needs_review FROM {RESULT_TABLE} "
                        "WHERE status = 'probable_match' AND kol_primary").fetchall()
    without_email = [row for row in rows if not by_id[row[0]]["email"]]
    assert without_email
    for kol_id, crm_name, score, reasons, review in without_email:
        assert crm_name == by_id[kol_id]["full_name"] and 0.9 <= score <= 1 and review
        fields = {reason["field"]: reason for reason in json.loads(reasons)}
        assert set(fields) == {"name", "phone", "email", "institution", "role"}
        assert fields["name"]["level"] == "first exact, last exact" and fields["name"]["bits"] > 0
        assert fields["phone"]["level"] == "equal" and fields["phone"]["kol"] == fields["phone"]["crm"]


def test_kols_sharing_an_email_are_duplicate_in_kols_and_archived_kols_are_left_out():
    kols = make_kols(4)
    kols[1]["email"] = kols[0]["email"].upper()
    kols[3]["is_archived"] = True
    conn = duckdb.connect()
    load(conn, kols, [])
    result = reconcile(conn, "kols", "contacts", run_id="dups")
    rows = dict(conn.execute(f"SELECT kol_id, status FROM {RESULT_TABLE}").fetchall())
    assert rows == {"kol_0000": "missing_in_crm", "kol_0001": "duplicate_in_kols", "kol_0002": "missing_in_crm"}
    assert result.kols == 3 and result.contacts == 0


def test_a_kol_meets_its_contact_by_the_last_name_at_its_institution_or_by_an_email_spelling_its_name():
    """Two true pairs whose names sound different (a typo in the first name; a nickname outside the name's group),
    with other emails: only the last name at one institution, or the contact's email spelling the KOL's name,
    brings each pair together. Both are probable matches: the contacts compared with KOLs are blocked on every
    kind of key, not only on those the contact-contact pass uses."""
    kols = make_kols(2)
    kols[0].update(full_name="Roger Juarez", email="roger_juarez@lakebenjaminme40.us", phone="+1 668 932 7135",
                   institution="Lake Benjamin Memorial Hospital", department="Endocrinology",
                   title="Head of Endocrinology", location={"city": "Lake Benjamin", "state": None, "country": "US"})
    kols[1].update(full_name="Sergey Vladimirov", email="vladimirovs@cityhospitalno8.ru", phone="+7 99 836 1068",
                   institution="City Hospital No. 39, st. Petushki", department="Orthopedics",
                   title="Orthopedic Surgeon", location={"city": "st. Petushki", "state": None, "country": "RU"})
    contacts = [
        {"Id": "003A00000000000001", "FirstName": "Roer", "LastName": "Juarez", "Email": "roger_juirez@lakebenjaminme40.us",
         "Title": "Head of Endocrinology", "Account.Name": "Lake Benjamin Memorial Hospital",
         "MailingCity": "Lake Benjamin", "MailingCountry": "US"},
        {"Id": "003A00000000000002", "FirstName": "Seryozha", "LastName": "Vladimirov",
         "Email": "sergey_vladimirov@styugorskregio2.ru", "Phone": "881 1835411", "Department": "Orthopedics",
         "Account.Name": "st. Yugorsk Regional Hospital", "MailingCity": "st. Yugorsk", "MailingCountry": "RU"},
    ]
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="keys")
    proposed = conn.execute(f"SELECT kol_id, crm_id FROM {RESULT_TABLE} WHERE status = 'probable_match' ORDER BY kol_id"
                            ).fetchall()
    assert proposed == [("kol_0000", "003A00000000000001"), ("kol_0001", "003A00000000000002")]


def anna_smith(title: str | None, custom: str) -> duckdb.DuckDBPyConnection:
    """One KOL (Anna Smith, with a 'tier' column 'tier_1') and her contact under her email, with `title` and `custom`."""
    kols = make_kols(1)
    conn = duckdb.connect()
    load(conn, kols, [])
    conn.execute("INSERT INTO contacts (crm_id, email, first_name, last_name, title, custom) VALUES "
                 "('003A', ?, 'Anna', 'Smith', ?, ?)", [kols[0]["email"], title, custom])
    conn.execute("CREATE OR REPLACE TABLE kols AS SELECT *, 'tier_1' AS tier FROM kols")
    return conn


def test_custom_rule_compares_a_key_of_the_custom_json():
    conn = anna_smith(None, '{"Tier__c": "tier_2"}')
    rule = FieldRule("tier", "custom.Tier__c", "text", "kol", name="tier")
    reconcile(conn, "kols", "contacts", [DEFAULT_RULES[0], rule], run_id="custom")
    status, differences = conn.execute(f"SELECT status, differences::VARCHAR FROM {RESULT_TABLE}").fetchone()
    assert status == "conflict"
    assert json.loads(differences) == [{"field": "tier", "kol_value": "tier_1", "crm_value": "tier_2"}]


def test_differences_json_keeps_quotes_backslashes_accents_and_missing_values():
    conn = anna_smith('Head "Neuro" \\ Ünit', "{}")
    conn.execute("CREATE OR REPLACE TABLE kols AS SELECT * REPLACE ('Chef de service' AS title) FROM kols")
    rules = [DEFAULT_RULES[0], FieldRule("title", "title", "text", "kol"),
             FieldRule("tier", "custom.Tier__c", "text", "kol", name='tier "A"')]
    reconcile(conn, "kols", "contacts", rules, run_id="escapes")
    differences = conn.execute(f"SELECT differences::VARCHAR FROM {RESULT_TABLE}").fetchone()[0]
    assert json.loads(differences) == [
        {"field": "title", "kol_value": "Chef de service", "crm_value": 'Head "Neuro" \\ Ünit'},
        {"field": 'tier "A"', "kol_value": "tier_1", "crm_value": None}]


def test_runs_table_appends_and_result_is_replaced(reconciled):
    conn, _, _ = reconciled
    reconcile(conn, "kols", "contacts", run_id="run-2")
    runs = conn.execute(f"SELECT run_id, {' + '.join(STATUSES)} FROM {RUNS_TABLE} ORDER BY reconciled_at").fetchall()
    assert [r for r, _ in runs][-2:] == ["run-1", "run-2"]
    assert runs[-1][1] == conn.execute(f"SELECT count(*) FROM {RESULT_TABLE}").fetchone()[0]
    assert conn.execute(f"SELECT DISTINCT run_id FROM {RESULT_TABLE}").fetchall() == [("run-2",)]
    comments = conn.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name IN (?, ?) AND comment IS NULL",
                            [RESULT_TABLE, RUNS_TABLE]).fetchone()[0]
    assert comments == 0


def test_sql_generator_plants_the_same_cases():
    """The benchmark's DuckDB generator: statuses come out as planted (sampled at 2,000 KOLs)."""
    from crm.salesforce_standin.discrepancies import generate_kols_sql, plant_discrepancies_sql

    conn = duckdb.connect()
    generate_kols_sql(conn, "kols", 2000, seed=3)
    plant_discrepancies_sql(conn, "kols", "contacts", 0.3, seed=3)
    result = reconcile(conn, "kols", "contacts", run_id="sql")
    for status in ("matched", "conflict", "missing_in_crm", "crm_only", "duplicate_in_crm", "orphan_in_crm", "id_conflict",
                   "probable_match"):
        assert result.counts[status] > 0, status
    # the KOLs without email have a contact of their own under an email the warehouse lacks: probable matches
    without_email = conn.execute("SELECT count(*) FROM kols WHERE email IS NULL").fetchone()[0]
    paired = conn.execute("SELECT count(*) FROM kol_crm_reconciliation JOIN kols ON id = kol_id "
                          "WHERE email IS NULL AND status = 'probable_match' AND kol_primary").fetchone()[0]
    assert without_email and paired == without_email and result.counts["no_email"] == 0
    assert result.counts["matched"] + result.counts["conflict"] > 1400


def test_planted_contacts_are_deterministic_and_salesforce_shaped():
    first, second = planted(seed=5), planted(seed=5)
    assert first[1] == second[1] and first[2] == second[2]
    assert planted(seed=6)[1] != first[1]
    assert all(re.fullmatch(r"003[A-Za-z0-9]{15}", c["Id"]) and "Account.Name" in c for c in first[1])


def test_each_organization_is_reconciled_against_the_shared_crm_without_the_others_contacts():
    from crm.reconcile import org_contacts, org_kols

    kols, contacts, _ = planted(seed=4, n=40)
    conn = duckdb.connect()
    load(conn, kols, contacts)
    # the same CRM extract for both; the KOLs split: even ids are emea's, odd ones default's
    conn.execute("CREATE OR REPLACE TABLE kols AS SELECT CASE WHEN right(id, 1) IN ('0','2','4','6','8') THEN 'emea' "
                 "ELSE 'default' END AS org, * FROM kols")
    conn.execute("CREATE TABLE crm_contacts AS SELECT o.org, c.* FROM contacts c, (VALUES ('default'), ('emea')) o(org)")
    for org in ("default", "emea"):
        reconcile(conn, org_kols(org), org_contacts(org), run_id=f"run-{org}", org=org)
    by_org = dict(conn.execute(f"SELECT org, count(*) FILTER (WHERE kol_primary) FROM {RESULT_TABLE} GROUP BY org").fetchall())
    assert by_org == dict(conn.execute("SELECT org, count(*) FROM kols WHERE NOT is_archived GROUP BY org").fetchall())
    # a contact linked to one organization's KOL is never an orphan or a stray contact of the other
    linked = conn.execute(f"SELECT r.org, k.org FROM {RESULT_TABLE} r JOIN kols k ON k.id = r.external_id "
                          "WHERE r.status IN ('orphan_in_crm', 'crm_only')").fetchall()
    assert all(result_org == kol_org for result_org, kol_org in linked)
    assert conn.execute(f"SELECT count(DISTINCT run_id) FROM {RESULT_TABLE}").fetchall()[0][0] == 2
    assert sorted(conn.execute(f"SELECT org FROM {RUNS_TABLE}").fetchall()) == [("default",), ("emea",)]


def test_the_contacts_an_organization_is_reconciled_against_leave_out_those_another_organization_owns():
    from crm.reconcile import org_contacts

    conn = duckdb.connect()
    conn.execute("""CREATE TABLE kols AS SELECT * FROM (VALUES
        ('default', 'K1', 'Ann@Here.org', false), ('default', 'K2', 'shared@both.org', false),
        ('emea', 'E1', ' eve@there.org', false), ('emea', 'E2', 'SHARED@both.org', false),
        ('emea', 'E3', 'gone@there.org', true), ('emea', 'E4', NULL, false)) k(org, id, email, is_archived)""")
    conn.execute("""CREATE TABLE crm_contacts AS SELECT 'default' AS org, * FROM (VALUES
        ('c-ann', 'ann@here.org', NULL), ('c-eve', 'Eve@There.org ', NULL), ('c-shared', 'shared@both.org', NULL),
        ('c-archived', 'gone@there.org', NULL), ('c-linked-e1', 'eve@there.org', 'E1'),
        ('c-linked-k1', 'eve@there.org', 'K1'), ('c-orphan', 'nobody@x.org', 'K9'), ('c-no-email', NULL, NULL))
        c(crm_id, email, external_id)""")
    kept = {row[0] for row in conn.execute(f"SELECT crm_id FROM {org_contacts('default')}").fetchall()}
    # another organization's: linked to its KOL, or without a link and with the email only its KOLs have
    assert kept == {"c-ann", "c-shared", "c-archived", "c-linked-k1", "c-orphan", "c-no-email"}


def test_duplicate_set_ids_stay_the_same_the_next_night_when_members_change_or_a_contact_joins():
    kols, contacts, _ = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    in_sets = f"SELECT crm_id, duplicate_set_id FROM {RESULT_TABLE} WHERE duplicate_set_id IS NOT NULL"
    reconcile(conn, "kols", "contacts", run_id="night-1")
    first = dict(conn.execute(in_sets).fetchall())
    assert len(set(first.values())) >= 2
    # the next night: one member of every set retitled (modified since), and a new contact (Salesforce issues
    # larger Ids) sharing the email of another set's member
    changed = sorted({set_id: crm_id for crm_id, set_id in sorted(first.items())}.values())
    conn.execute("UPDATE contacts SET title = 'Senior ' || coalesce(title, 'Physician'), "
                 "last_modified = last_modified + INTERVAL 1 DAY WHERE list_contains(?, crm_id)", [changed])
    joined = max(first, key=lambda crm_id: first[crm_id])
    conn.execute("INSERT INTO contacts SELECT * REPLACE ('003zzzzzzzzzzzzzzz' AS crm_id, NULL AS external_id) "
                 "FROM contacts WHERE crm_id = ?", [joined])
    reconcile(conn, "kols", "contacts", run_id="night-2")
    second = dict(conn.execute(in_sets).fetchall())
    assert {crm_id: second.get(crm_id) for crm_id in first} == first
    assert second["003zzzzzzzzzzzzzzz"] == first[joined]
