"""Contact features kept between nights: a night computes only the contacts that changed, and its result is
the one a reconciliation from scratch gives; erasure deletes the kept file of the person's organization."""

from __future__ import annotations

import duckdb
import pytest

from crm import duplicates, features, kept_features, kept_stage, normalize, probable
from crm.reconcile import ReconciliationResult, reconcile
from crm.salesforce_standin.discrepancies import generate_kols_sql, plant_discrepancies_sql
from crm.tables import RESULT_TABLE
from privacy.stores import KeptFeatures
from privacy.subject import Subject

RESULT = f"SELECT * EXCLUDE (run_id, reconciled_at) FROM {RESULT_TABLE} ORDER BY ALL"


def warehouse(path) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(str(path))
    generate_kols_sql(conn, "kols", 2000, seed=5)
    plant_discrepancies_sql(conn, "kols", "contacts", 0.2, seed=5)
    return conn


def change_a_night(conn: duckdb.DuckDBPyConnection) -> None:
    """What a night brings: retitled and renamed contacts, a changed email, deletions, new contacts (copies of
    others under another email: probable matches and duplicates), an archived KOL."""
    conn.execute("UPDATE contacts SET title = 'Chief ' || coalesce(title, 'Physician') WHERE hash(crm_id) % 50 = 1")
    conn.execute("UPDATE contacts SET last_name = last_name || 'son', email = 'x' || email WHERE hash(crm_id) % 50 = 2")
    conn.execute("DELETE FROM contacts WHERE hash(crm_id) % 100 = 3")
    conn.execute("INSERT INTO contacts SELECT * REPLACE ('new' || crm_id AS crm_id, NULL AS external_id, "
                 "'other.' || email AS email) FROM contacts WHERE hash(crm_id) % 100 = 4")
    conn.execute("UPDATE kols SET is_archived = true WHERE hash(id) % 100 = 5")


def reconcile_kept(conn: duckdb.DuckDBPyConnection, data_dir, run_id: str) -> ReconciliationResult:
    with kept_features.attached(conn, data_dir, "default") as kept:
        return reconcile(conn, "kols", "contacts", run_id=run_id, kept=kept)


def test_a_night_with_kept_features_gives_the_result_of_a_reconciliation_from_scratch(tmp_path):
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    reconcile_kept(kept_night, tmp_path, "night-1")
    reconcile(plain, "kols", "contacts", run_id="night-1")
    assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall()
    assert kept_features.kept_path(tmp_path, "default").exists()

    for conn in (kept_night, plain):
        change_a_night(conn)
    reconcile_kept(kept_night, tmp_path, "night-2")
    reconcile(plain, "kols", "contacts", run_id="night-2")
    second = plain.execute(RESULT).fetchall()
    assert kept_night.execute(RESULT).fetchall() == second
    statuses = {row[0] for row in plain.execute(f"SELECT DISTINCT status FROM {RESULT_TABLE}").fetchall()}
    assert {"probable_match", "duplicate_in_crm", "conflict", "matched"} <= statuses
    # the rows the night left as they were are stamped with it too
    assert kept_night.execute(f"SELECT DISTINCT run_id FROM {RESULT_TABLE}").fetchall() == [("night-2",)]

    # and both are what a warehouse that never reconciled before gets
    scratch = duckdb.connect()
    for table in ("kols", "contacts"):
        rows = plain.sql(f"SELECT * FROM {table}").to_arrow_table()  # noqa: F841 (read by name below)
        scratch.execute(f"CREATE TABLE {table} AS SELECT * FROM rows")
    reconcile(scratch, "kols", "contacts", run_id="scratch")
    assert scratch.execute(RESULT).fetchall() == second


SWITCHBOARD = "+49 30 5550100"  # a number many contacts give: a blocking key only while at most 20 hold it
# Contacts holding the switchboard besides the two below, night by night: its holders cross the cap both ways.
SWITCHBOARD_FILLERS = [16, 20, 14, 25, 17]


def a_night_of_random_changes(conn: duckdb.DuckDBPyConnection, night: int, fillers: int) -> None:
    """`fillers` contacts give the switchboard (the others their own number); a tenth of the contacts, picked by a
    hash of their id and the night, are retitled, renamed, moved, given the email of another (one joins the largest
    group sharing a KOL's), deleted or copied under another email; and a tenth of the KOLs are retitled, moved,
    given another email or another KOL's, archived or brought back."""
    pick, kol_pick = f"hash(crm_id || '{night}') % 50", f"hash(id || 'kol{night}') % 50"
    conn.execute(f"UPDATE kols SET title = 'Professor of ' || coalesce(title, 'Medicine') WHERE {kol_pick} = 1")
    conn.execute(f"UPDATE kols SET email = 'moved{night}.' || email WHERE {kol_pick} = 2")
    conn.execute(f"UPDATE kols SET email = (SELECT min(email) FROM kols) WHERE {kol_pick} = 3")
    conn.execute(f"UPDATE kols SET is_archived = NOT coalesce(is_archived, false) WHERE {kol_pick} IN (4, 5)")
    conn.execute(f"UPDATE kols SET location = struct_pack(city := 'Town {night}', state := location.state, "
                 f"country := location.country) WHERE {kol_pick} = 6")
    conn.execute(f"UPDATE contacts SET phone = '+1 555 01' || lpad((hash(crm_id) % 100)::VARCHAR, 2, '0') "
                 f"WHERE phone = '{SWITCHBOARD}' AND NOT starts_with(crm_id, 'anna')")
    conn.execute(f"UPDATE contacts SET phone = '{SWITCHBOARD}' WHERE crm_id IN (SELECT crm_id FROM contacts "
                 f"WHERE NOT starts_with(crm_id, 'anna') ORDER BY hash(crm_id || '{night}') LIMIT {fillers})")
    conn.execute(f"UPDATE contacts SET title = 'Head of ' || coalesce(title, 'Physicians') WHERE {pick} = 1")
    conn.execute(f"UPDATE contacts SET last_name = last_name || 'er', email = 'n{night}' || email WHERE {pick} = 2")
    conn.execute(f"UPDATE contacts SET institution = 'Institute {night}', city = 'City {night}' WHERE {pick} = 3")
    conn.execute(f"UPDATE contacts SET email = s.before FROM (SELECT crm_id, lag(email) OVER (ORDER BY crm_id) AS "
                 f"before FROM contacts) s WHERE s.crm_id = contacts.crm_id "
                 f"AND {pick.replace('crm_id', 's.crm_id')} = 6 AND s.before IS NOT NULL")
    conn.execute(f"UPDATE contacts SET email = (SELECT email FROM contacts WHERE email IN (SELECT email FROM kols) "
                 f"GROUP BY email ORDER BY count(*) DESC, email LIMIT 1), external_id = NULL "
                 f"WHERE crm_id = (SELECT min(crm_id) FROM contacts WHERE {pick} = 7)")
    conn.execute(f"DELETE FROM contacts WHERE {pick} = 4 AND NOT starts_with(crm_id, 'anna')")
    conn.execute(f"INSERT INTO contacts SELECT * REPLACE ('c{night}' || crm_id AS crm_id, NULL AS external_id, "
                 f"'copy{night}.' || email AS email) FROM contacts WHERE {pick} = 5 AND NOT starts_with(crm_id, 'anna')")


def candidate_pairs_from_scratch(conn: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    normalize.register(conn)
    features.register(conn)
    probable.contact_features(conn, "contacts")
    duplicates.candidate_pairs(conn)
    found = set(conn.execute(f"SELECT a.id, b.id FROM {duplicates.PAIRS} p JOIN {probable.CONTACT_FEATURES} a "
                             f"ON a.rid = p.a JOIN {probable.CONTACT_FEATURES} b ON b.rid = p.b").fetchall())
    for table in (duplicates.PAIRS, probable.CONTACT_FEATURES):
        conn.execute(f"DROP TABLE {table}")
    return found


def test_night_after_night_the_kept_pairs_are_those_a_reconciliation_from_scratch_compares(tmp_path):
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    for conn in (kept_night, plain):  # one person twice, brought together by the switchboard alone
        conn.execute(f"""INSERT INTO contacts (crm_id, first_name, last_name, email, phone, institution, country)
            VALUES ('anna1', 'Anna', 'Schmidt', 'anna.schmidt@klinik-nord.de', '{SWITCHBOARD}', 'Klinik Nord', 'DE'),
                   ('anna2', 'Anna', 'Schmit', 'aschmit@example-mail.de', '{SWITCHBOARD}', NULL, 'DE')""")
    anna_compared = []
    for night, fillers in enumerate(SWITCHBOARD_FILLERS, start=1):
        if night > 1:
            for conn in (kept_night, plain):
                a_night_of_random_changes(conn, night, fillers)
        result = reconcile_kept(kept_night, tmp_path, f"night-{night}")
        reconcile(plain, "kols", "contacts", run_id=f"night-{night}")
        assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall(), f"night {night}"
        rows = plain.execute(f"SELECT count(*) FROM {RESULT_TABLE}").fetchone()[0]
        made, signed = result.rows_made, result.rows_signed
        assert made == rows if night == 1 else made < rows / 2, f"night {night}: {made} of {rows} rows made"
        assert signed == rows if night == 1 else made <= signed < rows, f"night {night}: {signed} of {rows} signed"
        with kept_features.attached(kept_night, tmp_path, "default"):
            kept_pairs = set(kept_night.execute(f"SELECT DISTINCT a, b FROM {kept_features.PAIRS}").fetchall())
        assert kept_pairs == candidate_pairs_from_scratch(plain), f"night {night}"
        anna_compared.append(("anna1", "anna2") in kept_pairs)
    holders = [fillers + 2 for fillers in SWITCHBOARD_FILLERS]
    assert anna_compared == [count <= probable.DUPLICATE_BLOCK_CAP for count in holders] == [
        True, False, True, False, True]


def test_rows_another_run_wrote_are_never_taken_for_the_kept_ones(tmp_path):
    """The kept signatures stand for the rows of the run that left them: a run without the kept file (or one killed
    between the warehouse's commit and the kept file's) leaves other rows, and the next night makes every row."""
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    rows = kept_night.execute("SELECT count(*) FROM contacts").fetchone()[0]
    assert reconcile_kept(kept_night, tmp_path, "night-1").rows_made > rows
    for conn in (kept_night, plain):
        change_a_night(conn)
    reconcile(kept_night, "kols", "contacts", run_id="night-2")  # the kept file not attached
    for conn in (kept_night, plain):
        a_night_of_random_changes(conn, 3, 0)
    everything = reconcile_kept(kept_night, tmp_path, "night-3").rows_made
    reconcile(plain, "kols", "contacts", run_id="night-3")
    assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall()
    assert everything == kept_night.execute(f"SELECT count(*) FROM {RESULT_TABLE}").fetchone()[0]
    a_night_of_random_changes(kept_night, 4, 0)
    assert reconcile_kept(kept_night, tmp_path, "night-4").rows_made < everything / 2


def test_a_night_hashes_the_inputs_only_of_the_rows_its_changes_can_reach(tmp_path):
    conn = warehouse(tmp_path / "w.duckdb")
    rows = reconcile_kept(conn, tmp_path, "night-1").rows_signed
    assert rows == conn.execute(f"SELECT count(*) FROM {RESULT_TABLE}").fetchone()[0]
    contact = conn.execute(f"SELECT min(crm_id) FROM {RESULT_TABLE} WHERE status = 'matched' "
                           "AND duplicate_set_id IS NULL").fetchone()[0]
    conn.execute("UPDATE contacts SET title = 'Chief of ' || coalesce(title, 'Staff') WHERE crm_id = ?", [contact])
    night = reconcile_kept(conn, tmp_path, "night-2")
    # the retitled contact, the KOLs without a contact, and the contacts with a probable match or in a set
    reachable = conn.execute(f"SELECT count(*) FROM {RESULT_TABLE} WHERE crm_id = ? OR crm_id IS NULL "
                             "OR match_score IS NOT NULL OR duplicate_set_id IS NOT NULL", [contact]).fetchone()[0]
    assert night.rows_signed == reachable < rows / 4
    # and of those, the one row that changed is made again: its title now differs from its KOL's
    assert night.rows_made == 1
    assert conn.execute(f"SELECT status FROM {RESULT_TABLE} WHERE crm_id = ?", [contact]).fetchone()[0] == "conflict"


def test_only_the_contacts_that_changed_are_computed_again(tmp_path):
    conn = warehouse(tmp_path / "w.duckdb")
    contacts = conn.execute("SELECT count(*) FROM contacts").fetchone()[0]
    with kept_features.attached(conn, tmp_path, "default"):
        normalize.register(conn)
        features.register(conn)
        assert kept_features.build(conn, "contacts", "_pm_contacts") == contacts
        conn.execute("UPDATE contacts SET phone = '+49 30 5550100' WHERE crm_id IN "
                     "(SELECT crm_id FROM contacts ORDER BY crm_id LIMIT 3)")
        conn.execute("DELETE FROM contacts WHERE crm_id = (SELECT max(crm_id) FROM contacts)")
        assert kept_features.build(conn, "contacts", "_pm_contacts") == 3
        kept = conn.execute(f"SELECT count(*) FROM {kept_features.FEATURES}").fetchone()[0]
        assert kept == contacts - 1 == conn.execute("SELECT count(*) FROM _pm_contacts").fetchone()[0]
        # rows computed by other code (an upgrade) are not reused
        conn.execute(f"UPDATE {kept_features.STAMP} SET value = 'older code'")
        assert kept_features.build(conn, "contacts", "_pm_contacts") == contacts - 1
        # nor rows a killed night left half updated: their stamp is empty until they are whole again
        conn.execute(f"DELETE FROM {kept_features.STAMP}")
        assert kept_features.build(conn, "contacts", "_pm_contacts") == contacts - 1


def staged_sides(conn: duckdb.DuckDBPyConnection, data_dir) -> list[list[tuple]]:
    with kept_features.attached(conn, data_dir, "default") as kept:
        return [conn.execute(f"SELECT * FROM {kept}.{side} ORDER BY ALL").fetchall()
                for side in ("staged_kols", "staged_contacts")]


def changed_rows(conn: duckdb.DuckDBPyConnection, before: str) -> int:
    """The active KOLs and the contacts that are new or differ from their copies in the attached database `before`."""
    return conn.execute(f"""SELECT (SELECT count(*) FROM (FROM kols WHERE is_archived IS NOT TRUE
                                                            EXCEPT FROM {before}.kols WHERE is_archived IS NOT TRUE))
                                 + (SELECT count(*) FROM (FROM contacts EXCEPT FROM {before}.contacts))""").fetchone()[0]


def test_a_night_stages_only_the_kols_and_contacts_that_changed(tmp_path):
    conn = warehouse(tmp_path / "w.duckdb")
    active, contacts = conn.execute("SELECT (SELECT count(*) FROM kols WHERE is_archived IS NOT TRUE), "
                                    "(SELECT count(*) FROM contacts)").fetchone()
    assert reconcile_kept(conn, tmp_path, "night-1").rows_staged == active + contacts
    conn.execute(f"ATTACH '{tmp_path / 'before.duckdb'}' AS before")
    conn.execute("CREATE TABLE before.kols AS FROM kols; CREATE TABLE before.contacts AS FROM contacts")
    a_night_of_random_changes(conn, 2, 3)
    changed = changed_rows(conn, "before")
    assert 0 < changed < (active + contacts) / 5
    assert reconcile_kept(conn, tmp_path, "night-2").rows_staged == changed
    # what is kept is what staging every row gives
    scratch = tmp_path / "scratch"
    reconcile_kept(conn, scratch, "night-2-scratch")
    assert staged_sides(conn, tmp_path) == staged_sides(conn, scratch)
    # rows staged by other code (an upgrade) are staged again
    with kept_features.attached(conn, tmp_path, "default") as kept:
        for side in ("staged_kols", "staged_contacts"):
            conn.execute(f"UPDATE {kept}.{side}{kept_stage.STATE} SET stamp = 'older code'")
    assert reconcile_kept(conn, tmp_path, "night-3").rows_staged == conn.execute(
        "SELECT (SELECT count(*) FROM kols WHERE is_archived IS NOT TRUE) + (SELECT count(*) FROM contacts)").fetchone()[0]


def test_a_night_killed_between_staging_and_classifying_is_classified_whole_the_next(tmp_path):
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    reconcile_kept(kept_night, tmp_path, "night-1")
    with kept_features.attached(kept_night, tmp_path, "default") as kept:
        for table in (kept_stage.CLASSIFIED, kept_stage.CLASSIFIED + kept_stage.STATE):
            kept_night.execute(f"CREATE TABLE night_1_{table} AS FROM {kept}.{table}")
    for conn in (kept_night, plain):
        a_night_of_random_changes(conn, 2, 0)
    reconcile_kept(kept_night, tmp_path, "night-2")
    with kept_features.attached(kept_night, tmp_path, "default") as kept:  # as if night 2 died before classifying
        for table in (kept_stage.CLASSIFIED, kept_stage.CLASSIFIED + kept_stage.STATE):
            kept_night.execute(f"CREATE OR REPLACE TABLE {kept}.{table} AS FROM night_1_{table}")
    for conn in (kept_night, plain):
        a_night_of_random_changes(conn, 3, 0)
    reconcile_kept(kept_night, tmp_path, "night-3")
    reconcile(plain, "kols", "contacts", run_id="night-3")
    assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall()


def test_a_contact_modified_later_becomes_its_sets_suggested_master_the_next_night(tmp_path):
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    for conn in (kept_night, plain):  # one person twice, alike but for the time each was last modified
        conn.execute("""INSERT INTO contacts (crm_id, first_name, last_name, email, phone, institution, city, country,
                                              last_modified)
            VALUES ('bert1', 'Bert', 'Vandenbroucke', 'bert.vdb@uzgent.be', '+32 9 332 1111', 'UZ Gent', 'Gent', 'BE',
                    TIMESTAMPTZ '2026-03-02 10:00:00+00'),
                   ('bert2', 'Bert', 'Vandenbroucke', 'bert.vdb@uzgent.be', '+32 9 332 1111', 'UZ Gent', 'Gent', 'BE',
                    TIMESTAMPTZ '2026-03-01 10:00:00+00')""")
    master = f"SELECT DISTINCT suggested_master, master_reason FROM {RESULT_TABLE} WHERE crm_id IN ('bert1', 'bert2')"
    reconcile_kept(kept_night, tmp_path, "night-1")
    assert kept_night.execute(master).fetchall() == [("bert1", "most recently modified")]
    for conn in (kept_night, plain):  # bert2 saved again with nothing else changed
        conn.execute("UPDATE contacts SET last_modified = TIMESTAMPTZ '2026-03-03 10:00:00+00' WHERE crm_id = 'bert2'")
    reconcile_kept(kept_night, tmp_path, "night-2")
    reconcile(plain, "kols", "contacts", run_id="night-2")
    assert kept_night.execute(master).fetchall() == [("bert2", "most recently modified")]
    assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall()


def test_a_contact_without_an_id_leaves_no_stale_staged_row(tmp_path):
    kept_night, plain = warehouse(tmp_path / "kept.duckdb"), warehouse(tmp_path / "plain.duckdb")
    for conn in (kept_night, plain):
        conn.execute("UPDATE contacts SET crm_id = NULL WHERE crm_id = (SELECT min(crm_id) FROM contacts)")
    reconcile_kept(kept_night, tmp_path, "night-1")
    for conn in (kept_night, plain):
        conn.execute("UPDATE contacts SET title = 'Dean of Medicine' WHERE crm_id IS NULL")
    reconcile_kept(kept_night, tmp_path, "night-2")
    reconcile(plain, "kols", "contacts", run_id="night-2")
    assert kept_night.execute(RESULT).fetchall() == plain.execute(RESULT).fetchall()
    reconcile_kept(kept_night, tmp_path / "scratch", "night-2-scratch")
    assert staged_sides(kept_night, tmp_path) == staged_sides(kept_night, tmp_path / "scratch")


def test_an_unreadable_kept_file_is_computed_again(tmp_path):
    path = kept_features.kept_path(tmp_path, "default")
    path.parent.mkdir()
    path.write_bytes(b"not a database")
    conn = warehouse(tmp_path / "w.duckdb")
    reconcile_kept(conn, tmp_path, "night-1")
    assert conn.execute(f"SELECT count(*) FROM {RESULT_TABLE}").fetchone()[0] > 2000
    assert path.stat().st_size > 100_000
    assert (path.parent.stat().st_mode & 0o077) == 0


@pytest.mark.parametrize("org, erased", [("default", True), ("emea", False)])
def test_erasure_deletes_the_kept_file_holding_the_person(tmp_path, org, erased):
    conn = warehouse(tmp_path / "w.duckdb")
    reconcile_kept(conn, tmp_path, "night-1")
    conn.close()
    crm_id, email = duckdb.connect(str(tmp_path / "w.duckdb")).execute(
        "SELECT crm_id, email FROM contacts WHERE email IS NOT NULL ORDER BY crm_id LIMIT 1").fetchone()
    store = KeptFeatures(tmp_path)
    subject = Subject(emails=(email,), org=org)
    found = store.erase(subject)
    path = kept_features.kept_path(tmp_path, "default")
    assert path.exists() is not erased
    assert [f.rows > 0 for f in found] == ([True] if erased else [])
    assert len(store.locate(Subject(emails=(email,)))) == (0 if erased else 1)


def test_erasure_of_a_kol_no_contact_matches_deletes_the_kept_file_holding_it(tmp_path):
    conn = warehouse(tmp_path / "w.duckdb")
    reconcile_kept(conn, tmp_path, "night-1")
    kol_id, email = conn.execute(f"SELECT kol_id, kol_email FROM {RESULT_TABLE} WHERE status = 'missing_in_crm' "
                                 "ORDER BY kol_id LIMIT 1").fetchone()
    conn.close()
    store = KeptFeatures(tmp_path)
    assert [f.rows > 0 for f in store.locate(Subject(kol_ids=(kol_id,)))] == [True]
    store.erase(Subject(kol_ids=(kol_id,), emails=(email,), org="default"))
    assert not kept_features.kept_path(tmp_path, "default").exists()
