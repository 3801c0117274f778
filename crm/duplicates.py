"""Duplicate sets within the CRM: contacts the probable-match rule says are one person.

Every contact is compared with the contacts it shares a blocking key with (probable.py: the same
keys, less the institution ones, and the same scores as KOL-contact pairs; an equal email is one
more agreeing field), when their names can be one person's and another field agrees too. Pairs scoring at
least the threshold are edges; connected contacts form one set, `duplicate_set_id` = 'dup-' and the
smallest contact id of the set. Each set gets a suggested master, by the first rule that tells its
contacts apart: has the external id (the KOL link), most complete (non-empty fields), most recently
modified; the smallest id when nothing does. Nothing is merged or deleted: the merge CSV says what
to merge, an admin does it in Salesforce or DemandTools.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from crm import probable, spreadsheet_csv

SETS = "_dup_sets"
PAIRS = "_dup_pairs"
MERGE_COLUMNS = ("MasterRecordId", "DuplicateRecordId", "DuplicateSetId", "MasterReason", "MasterName", "DuplicateName",
                 "MasterEmail", "DuplicateEmail")


def candidate_pairs(conn: duckdb.DuckDBPyConnection) -> None:
    """TEMP table PAIRS (a, b): the row ids (rid) of the contacts compared, a < b, from the contact features and their
    keys (probable.contact_features): sharing a key of DUPLICATE_KINDS held by at most DUPLICATE_BLOCK_CAP contacts, with
    names that can be one person's and another field agreeing. crm/kept_features.py keeps them between nights."""
    contacts = probable.CONTACT_FEATURES
    probable.pairs(conn, contacts, None, PAIRS, kinds=probable.DUPLICATE_KINDS, cap=probable.DUPLICATE_BLOCK_CAP)
    name_compatible(conn, PAIRS)
    conn.execute(f"DROP TABLE IF EXISTS {contacts}_keys")


def name_compatible(conn: duckdb.DuckDBPyConnection, pair_table: str, contacts: str = probable.CONTACT_FEATURES) -> None:
    """Keep the pairs of `pair_table` (rids of the feature table `contacts`) that can be one person: names that can
    be one person's, and another field agreeing (probable.name_compatible)."""
    probable.name_compatible(conn, pair_table, contacts, contacts, corroborated=True)


def find(conn: duckdb.DuckDBPyConnection, threshold: float, live_kols: str) -> int:
    """TEMP table _dup_sets (crm_id, duplicate_set_id, suggested_master, master_reason) of the contacts in a
    set, from the prepared contact features and the pairs to compare (PAIRS: candidate_pairs, or the kept ones);
    `live_kols` is a relation of the KOL ids (kol_id) an external id may name. Returns the number of sets."""
    contacts = probable.CONTACT_FEATURES
    total = conn.execute(f"SELECT count(*) FROM {contacts}").fetchone()[0]
    probable.score(conn, PAIRS, contacts, contacts, probable.prior_bits(probable.DUPLICATE_SHARE, total),
                   "_dup_edges", min_score=threshold)
    conn.execute(f"DROP TABLE {PAIRS}")
    # Connected components: every contact takes the smallest label among its neighbours until none changes
    # (sets are small, so a few rounds).
    conn.execute("""
CREATE OR REPLACE TEMP TABLE _dup_label AS
SELECT id, id AS label FROM (SELECT a AS id FROM _dup_edges UNION SELECT b FROM _dup_edges)""")
    while True:
        conn.execute("""
CREATE OR REPLACE TEMP TABLE _dup_next AS
SELECT l.id, least(l.label, min(n.label)) AS label
FROM _dup_label l JOIN (SELECT a AS id, b AS other FROM _dup_edges UNION ALL SELECT b, a FROM _dup_edges) e ON e.id = l.id
JOIN _dup_label n ON n.id = e.other GROUP BY l.id, l.label""")
        moved = conn.execute("SELECT count(*) FROM _dup_next n JOIN _dup_label l USING (id) WHERE n.label <> l.label").fetchone()[0]
        conn.execute("CREATE OR REPLACE TEMP TABLE _dup_label AS SELECT * FROM _dup_next")
        if not moved:
            break
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {SETS} AS
WITH facts AS (
  SELECT l.id AS crm_id, 'dup-' || l.label AS duplicate_set_id, k.kol_id IS NOT NULL AS linked,
         coalesce(f.completeness, 0) AS completeness, f.last_modified
  FROM _dup_label l JOIN {contacts} f ON f.id = l.id LEFT JOIN {live_kols} k ON k.kol_id = f.external_id
),
members AS (
  SELECT *, row_number() OVER (PARTITION BY duplicate_set_id
                               ORDER BY linked DESC, completeness DESC, last_modified DESC NULLS LAST, crm_id) AS rank
  FROM facts
),
masters AS (
  SELECT m.duplicate_set_id, m.crm_id AS master,
         CASE WHEN m.linked AND NOT r.linked THEN 'has the external id (linked to its KOL)'
              WHEN m.completeness > r.completeness THEN 'most complete (' || m.completeness || ' of 10 fields)'
              WHEN m.last_modified > r.last_modified OR (m.last_modified IS NOT NULL AND r.last_modified IS NULL)
                THEN 'most recently modified'
              ELSE 'smallest id (nothing else tells them apart)' END AS reason
  FROM members m JOIN members r ON r.duplicate_set_id = m.duplicate_set_id AND r.rank = 2
  WHERE m.rank = 1
)
SELECT crm_id, duplicate_set_id, master AS suggested_master, reason AS master_reason
FROM members JOIN masters USING (duplicate_set_id)""")
    for table in ("_dup_next", "_dup_label", "_dup_edges", "pm_sim"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    return conn.execute(f"SELECT count(DISTINCT duplicate_set_id) FROM {SETS}").fetchone()[0]


def write_merge_csv(conn: duckdb.DuckDBPyConnection, result_table: str, path: Path) -> int:
    """One row per contact to merge into its set's suggested master (Salesforce Ids, master first: the
    masterRecord / recordToMergeIds pair of Salesforce's merge call, and the master-duplicate file
    DemandTools merges from); UTF-8 with BOM, CRLF, through spreadsheet_csv. Returns the row count."""
    return spreadsheet_csv.write(conn, f"""
SELECT d.suggested_master, d.crm_id, d.duplicate_set_id, d.master_reason, m.crm_name, d.crm_name, m.crm_email, d.crm_email
FROM {result_table} d JOIN {result_table} m ON m.crm_id = d.suggested_master
WHERE d.duplicate_set_id IS NOT NULL AND d.crm_id <> d.suggested_master
ORDER BY d.duplicate_set_id, d.crm_id""", MERGE_COLUMNS, path)
