"""Reconcile non-archived KOLs against CRM contacts by normalized email, all set work in DuckDB.

Every contact ends on exactly one row, every KOL is counted on exactly one row (kol_primary).
A contact's status, by precedence (the first that applies):

1. id_conflict: its external id (e.g. KOL_Id__c) names KOL B but its email points at another
   KOL A (or at none);
2. orphan_in_crm: its external id names no non-archived KOL (exclusive with 1: B exists or not);
3. crm_only: its email matches no KOL (or it has no email);
4. duplicate_in_crm: its email is shared with other contacts still unclassified, all pointing at one KOL;
5. matched / conflict: the one contact of the KOL's email; conflict when a mapped field differs
   after normalization (`differences`).

A KOL is counted (kol_primary) on the row of the contact its email points at with the highest
precedence (id_conflict, orphan_in_crm, duplicate_in_crm, then the pair; ties by crm_id), so its
status is that row's status. A KOL no contact points at is no_email (no email; `candidates`
ranks up to three crm_only contacts by name and institution, blocked on last name + first
initial), duplicate_in_kols (another KOL with a smaller id has the same normalized email: the
smallest id is the one matched) or missing_in_crm.
"""

from __future__ import annotations

import inspect
import sys
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache, partial
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import duckdb
import pyarrow as pa

from crm import duplicates, features, kept_features, kept_result, kept_stage, normalize, probable
from crm.tables import (CONTACTS_TABLE, DEFAULT_ORG, RESULT_TABLE, RUNS_TABLE, STATUSES, column_names, ensure_tables,
                        score_band_sql)
from resources.crm.mapping import CONTACT_SCHEMA, NOT_WRITTEN
from resources.metadata_record import MetadataRecord, spread_over, unreported
from resources.sql import sql_literal, transaction

Kind = Literal["text", "name", "phone", "country"]
Policy = Literal["kol", "crm", "report"]
FULL_NAME = "first_name+last_name"
_KEY_MACROS = {"text": "crm_text", "name": "crm_name", "phone": "crm_phone_national", "country": "crm_country"}


@dataclass(frozen=True)
class FieldRule:
    """One mapped field: KOL SQL expression <-> contact column, how to compare, who wins on write-back.

    kol_column_sql is SQL over the KOL relation's columns (admin configuration, trusted), e.g.
    "location.city". crm_column is a canonical contact column, "first_name+last_name" (the
    name), or "custom.<key>" (a key in the `custom` JSON). policy: "kol" (write-back sets the
    CRM to the KOL value), "crm" (the CRM wins; nothing written) or "report" (only reported).
    """

    kol_column_sql: str
    crm_column: str
    kind: Kind = "text"
    policy: Policy = "report"
    name: str | None = None

    @property
    def written(self) -> bool:
        """Write-back writes this field: the KOL record wins, and the CRM field is one we write (not the
        name, not a field Salesforce sets or one on another object such as the Account's name)."""
        return self.policy == "kol" and self.crm_column != FULL_NAME and self.crm_column not in NOT_WRITTEN

    @property
    def field(self) -> str:
        """The field's label in `differences` and in the write-back plan."""
        if self.name:
            return self.name
        return "full_name" if self.crm_column == FULL_NAME else self.crm_column

    def crm_sql(self) -> str:
        """SQL of the contact side, over the canonical contact columns."""
        if self.crm_column == FULL_NAME:
            return "NULLIF(concat_ws(' ', first_name, last_name), '')"
        if self.crm_column.startswith("custom."):
            key = self.crm_column.removeprefix("custom.").replace('"', "")
            return f"json_extract_string(custom, {sql_literal('$.' + chr(34) + key + chr(34))})"
        if self.crm_column not in CONTACT_SCHEMA.names:
            raise ValueError(f"unknown contact column {self.crm_column!r} (canonical columns, {FULL_NAME} or custom.<key>)")
        return f'"{self.crm_column}"'


DEFAULT_RULES: tuple[FieldRule, ...] = (
    FieldRule("full_name", FULL_NAME, "name", "report"),
    FieldRule("title", "title", "text", "kol"),
    FieldRule("phone", "phone", "phone", "kol"),
    FieldRule("department", "department", "text", "kol"),
    FieldRule("institution", "institution", "text", "kol"),
    FieldRule("location.city", "city", "text", "kol"),
    FieldRule("location.state", "state", "text", "kol"),
    FieldRule("location.country", "country", "country", "kol"),
)


@dataclass
class ReconciliationResult(MetadataRecord):
    """A reconciliation's counts (its reconciliation_runs row), and once written its reports: the
    materialization metadata of crm/kol_reconciliation, which `commops reconcile` prints."""

    run_id: str = unreported()
    reconciled_at: datetime
    source: str
    kols: int
    contacts: int
    counts: dict[str, int] = spread_over(STATUSES, default_factory=dict)  # rows by status, every status
    needs_review: int = 0
    duplicate_sets: int = 0
    report_html: Path | None = None
    report_csv: Path | None = None
    duration_seconds: float = 0.0
    rows_made: int = 0  # rows of the result made by the run: every row, or (kept signatures) those whose inputs changed
    rows_staged: int = 0  # KOLs and contacts staged by the run: every one, or (kept sides) those that changed
    rows_signed: int = 0  # result rows whose inputs' hash the run computed: every row, or those a change can reach


def _side_columns(rules: list[FieldRule] | tuple[FieldRule, ...], side: Literal["kol", "crm"]) -> str:
    """Raw value v{i} of every rule, on one side (keys are computed only where raw values differ)."""
    parts = []
    for i, rule in enumerate(rules):
        raw = f"CAST(({rule.kol_column_sql}) AS VARCHAR)" if side == "kol" else f"CAST({rule.crm_sql()} AS VARCHAR)"
        parts.append(f"{raw} AS v{i}")
    return ", ".join(parts)


def _differences_sql(rules: list[FieldRule] | tuple[FieldRule, ...]) -> str:
    """A query over `keyed` (raw values c_v{i} and k_v{i} of a contact and its email KOL): crm_id,
    differences (the JSON list of the differing fields write-back writes) and differences_not_written
    (the others).

    Most pairs carry identical raw values, so a CASE compares the raw values first and computes
    the normalized keys only for the rest (DuckDB evaluates a CASE branch only for its rows), once
    per field (s{i}). Phone keys come as columns kp{i} / cp{i} (computed by _differences):
    crm_same_phone names each argument several times, and a macro repeats its argument's whole
    regex chain at every mention. The JSON is written as text, and only for the rows with a
    difference: a list of structs through to_json cost twice as much (~2 s CPU at 1M contacts)."""
    sames, items = [], []
    for i, rule in enumerate(rules):
        key = _KEY_MACROS[rule.kind]
        keyed = f"crm_same_phone(kp{i}, cp{i})" if rule.kind == "phone" else (
            f"{key}(k_v{i}) IS NOT DISTINCT FROM {key}(c_v{i})")
        sames.append(f"CASE WHEN k_v{i} IS NOT DISTINCT FROM c_v{i} THEN true ELSE {keyed} END AS s{i}")
        # what to_json makes of {'field': .., 'kol_value': .., 'crm_value': ..}
        items.append(f"""CASE WHEN NOT s{i} THEN '{{"field":' || to_json({sql_literal(rule.field)}) || ',"kol_value":' """
                     f"""|| coalesce(to_json(k_v{i})::VARCHAR, 'null') || ',"crm_value":' """
                     f"""|| coalesce(to_json(c_v{i})::VARCHAR, 'null') || '}}' END""")
    values = ", ".join(f"k_v{i}, c_v{i}" for i in range(len(rules)))

    def listed(written: bool) -> str:
        chosen = [i for i, rule in enumerate(rules) if rule.written == written]
        if not chosen:
            return "NULL::JSON"
        all_same = " AND ".join(f"s{i}" for i in chosen)
        return (f"CASE WHEN {all_same} THEN NULL ELSE ('[' || concat_ws(',', {', '.join(items[i] for i in chosen)}) "
                "|| ']')::JSON END")

    return (f"SELECT crm_id, {listed(True)} AS differences, {listed(False)} AS differences_not_written "
            f"FROM (SELECT crm_id, {values}, {', '.join(sames)} FROM keyed)")


def reconcile(
    conn: duckdb.DuckDBPyConnection,
    kols_relation: str,
    contacts_relation: str,
    mapping: list[FieldRule] | tuple[FieldRule, ...] = DEFAULT_RULES,
    run_id: str | None = None,
    source: str = "salesforce",
    match_threshold: float = probable.DEFAULT_THRESHOLD,
    rejected: pa.Table | None = None,
    org: str = DEFAULT_ORG,
    kept: str | None = None,
) -> ReconciliationResult:
    """Replace organization `org`'s rows of kol_crm_reconciliation with this run's result and append its
    reconciliation_runs row (kols_relation and contacts_relation: that organization's, see org_kols and
    org_contacts).

    kols_relation: a table/view with the warehouse `kols` columns; contacts_relation: one with the
    canonical contact columns (resources.crm.mapping.CONTACT_SCHEMA). Pairs scoring at least
    `match_threshold` are probable matches and duplicates; `rejected` (kol_id, crm_id) pairs are never
    proposed. `kept`: the alias of the organization's kept contact features (kept_features.attached), so that
    only the contacts that changed since are computed, and only the result rows whose inputs changed are made
    (kept_result.py); the result is the same either way.
    """
    started = time.perf_counter()
    run_id = run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]
    reconciled_at = datetime.now(UTC)
    normalize.register(conn)
    ensure_tables(conn)
    stamp = kept_result.stamp(_source(), mapping) if kept else ""
    rows_staged, since = _stage(conn, kols_relation, contacts_relation, mapping, kept, stamp, run_id)
    incremental = _contact_rows(conn, kept, stamp, run_id, since)
    sets = _probable(conn, kols_relation, contacts_relation, match_threshold, rejected, kept)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_lone AS {_LONE_KOLS}")
    compared = False
    if kept:
        compared = kept_result.usable(conn, kept, org, stamp)
        reach = _reach(conn, org) if compared and incremental else None
        _signatures(conn, reach)
        if compared:
            kept_result.compare(conn, kept, "_crm_sig", reach)
    inputs = _dirty_inputs(conn) if compared else _ALL_INPUTS
    _differences(conn, mapping, inputs)
    _result_rows(conn, inputs)
    try:
        with transaction(conn):
            this_org = f"org = {sql_literal(org)}"
            _write_changed_rows(conn, org, run_id, reconciled_at, compared)
            counts = dict(conn.execute(f"SELECT status, count(*) FROM {RESULT_TABLE} WHERE {this_org} GROUP BY status"
                                       ).fetchall())
            counts = {status: int(counts.get(status, 0)) for status in STATUSES}
            review = conn.execute(f"SELECT count(*) FROM {RESULT_TABLE} WHERE {this_org} AND needs_review "
                                  "AND kol_primary").fetchone()[0]
            kols, contacts, made = conn.execute("SELECT (SELECT count(*) FROM _crm_k), (SELECT count(*) FROM _crm_c), "
                                                "(SELECT count(*) FROM _crm_new)").fetchone()
            signed = conn.execute("SELECT count(*) FROM _crm_sig").fetchone()[0] if kept else 0
            duration = time.perf_counter() - started
            run = {"org": org, "run_id": run_id, "reconciled_at": reconciled_at, "source": source, "kols": kols,
                   "contacts": contacts, **counts, "needs_review": review, "duplicate_sets": sets,
                   "match_threshold": match_threshold, "duration_seconds": duration}
            conn.execute(f"INSERT INTO {RUNS_TABLE} ({', '.join(run)}) VALUES ({', '.join('?' * len(run))})",
                         list(run.values()))
        if kept:
            kept_result.record(conn, kept, "_crm_sig", run_id, stamp, compared)
    finally:
        staged = "(starts_with(name, '_crm_') OR starts_with(name, '_pm_') OR starts_with(name, '_dup_'))"
        for kind, name in conn.execute(
                f"SELECT 'TABLE', table_name AS name FROM duckdb_tables() WHERE temporary AND {staged} "
                f"UNION ALL SELECT 'VIEW', view_name AS name FROM duckdb_views() WHERE temporary AND {staged}").fetchall():
            conn.execute(f"DROP {kind} IF EXISTS {name}")
    return ReconciliationResult(run_id, reconciled_at, source, int(kols), int(contacts), counts, int(review), int(sets),
                                duration_seconds=duration, rows_made=int(made), rows_staged=rows_staged,
                                rows_signed=int(signed))


def _result_rows(conn: duckdb.DuckDBPyConnection, inputs: _RowInputs) -> None:
    """_crm_new: the rows of this run's result made from `inputs` (every row, or those of _crm_dirty), in the result
    table's own column types (so that an unchanged row hashes as its stored copy does), with that hash (h) of its
    produced columns, in one pass: the wide rows were written to a table of their own and copied again with the hash
    (0.45 s more at 1M)."""
    types = dict(conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? AND "
                              "database_name = current_database() AND schema_name = current_schema()",
                              [RESULT_TABLE]).fetchall())
    produced = column_names(RESULT_TABLE)[3:]  # all but org, run_id, reconciled_at
    typed = ", ".join(f'CAST("{name}" AS {types[name]}) AS "{name}"' for name in produced)
    hashed = ", ".join(f'"{name}"' for name in produced)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_new AS SELECT hash({hashed}) AS h, * "
                 f"FROM (SELECT {typed} FROM ({_rows_sql(inputs)}))")


def _write_changed_rows(conn: duckdb.DuckDBPyConnection, org: str, run_id: str, reconciled_at: datetime,
                        compared: bool) -> None:
    """Make the organization's rows of the result those of this run, stamped with it, writing only the rows that
    differ: a night changes few, and rewriting every row cost more than the rest of the reconciliation's SQL
    (about 20 s at a million rows). `compared`: _crm_new holds only the rows of new signatures, and _crm_stale the
    rows whose signature is gone (kept_result.py); else _crm_new holds every row, and a stored row is kept when a
    row of the same contact (or of the same KOL, on KOL-only rows) has the same hash of every produced column."""
    names = column_names(RESULT_TABLE)
    columns = ", ".join(f'"{name}"' for name in names)
    produced = ", ".join(f'"{name}"' for name in names[3:])  # all but org, run_id, reconciled_at
    if compared:
        conn.execute(f"DELETE FROM {RESULT_TABLE} WHERE org = ? AND (crm_id IN (SELECT crm_id FROM _crm_stale "
                     "WHERE crm_id IS NOT NULL) OR (crm_id IS NULL AND kol_id IN (SELECT kol_id FROM _crm_stale "
                     "WHERE crm_id IS NULL)))", [org])
        fresh = "_crm_new"
    else:
        same_row = "o.h = n.h AND o.crm_id IS NOT DISTINCT FROM n.crm_id AND o.kol_id IS NOT DISTINCT FROM n.kol_id"
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_old AS SELECT rowid AS row, hash({produced}) AS h, crm_id, "
                     f"kol_id FROM {RESULT_TABLE} WHERE org = ?", [org])
        conn.execute(f"DELETE FROM {RESULT_TABLE} WHERE rowid IN "
                     f"(SELECT o.row FROM _crm_old o ANTI JOIN _crm_new n ON {same_row})")
        fresh = f"_crm_new n ANTI JOIN _crm_old o ON {same_row}"
    conn.execute(f"INSERT INTO {RESULT_TABLE} ({columns}) "
                 f"SELECT {sql_literal(org)}, {sql_literal(run_id)}, "
                 f"{sql_literal(reconciled_at.isoformat())}::TIMESTAMPTZ, {produced} FROM {fresh}")
    conn.execute(f"UPDATE {RESULT_TABLE} SET run_id = ?, reconciled_at = ?::TIMESTAMPTZ WHERE org = ?",
                 [run_id, reconciled_at.isoformat(), org])


def _probable(conn: duckdb.DuckDBPyConnection, kols: str, contacts: str, threshold: float,
              rejected: pa.Table | None, kept: str | None) -> int:
    """The second pass (probable.py, duplicates.py): _pm_match, _pm_candidates and _dup_sets; returns the
    number of duplicate sets."""
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_uncounted AS {_UNCOUNTED_KOLS}")
    # The KOL pool: of the KOLs no contact row counts, each email's first and those without an email.
    conn.execute("CREATE OR REPLACE TEMP TABLE _pm_kpool AS "
                 "SELECT kol_id AS id FROM _crm_uncounted WHERE email_n IS NULL OR kol_id = email_first")
    conn.execute("CREATE OR REPLACE TEMP TABLE _pm_cpool_ids AS SELECT crm_id FROM _crm_rows WHERE status0 = 'crm_only'")
    rejected = rejected if rejected is not None else pa.table({"kol_id": pa.array([], pa.string()),
                                                               "crm_id": pa.array([], pa.string())})
    conn.register("_pm_rejected_arrow", rejected.select(["kol_id", "crm_id"]))
    conn.execute("CREATE OR REPLACE TEMP TABLE _pm_rejected AS SELECT * FROM _pm_rejected_arrow")
    conn.unregister("_pm_rejected_arrow")
    features.register(conn)
    if kept:
        kept_features.build(conn, contacts, probable.CONTACT_FEATURES)
    else:
        probable.contact_features(conn, contacts)
        duplicates.candidate_pairs(conn)
    probable.prepare(conn, kols, "_pm_kpool")
    probable.match(conn, "_pm_cpool_ids", threshold, "_pm_rejected")
    sets = duplicates.find(conn, threshold, "(SELECT kol_id FROM _crm_k)")
    probable.one_person_per_kol(conn, duplicates.SETS, "(SELECT crm_id, email_kol AS kol_id FROM _crm_rows WHERE email_kol IS NOT NULL)")
    return sets


def _stage(conn: duckdb.DuckDBPyConnection, kols: str, contacts: str, rules: list[FieldRule] | tuple[FieldRule, ...],
           kept: str | None, stamp: str, run_id: str) -> tuple[int, str | None]:
    """Stage both sides (_crm_k, _crm_c) with their email keys and a hash (h) of the rest of each row (the email key
    is made from the email), and the email -> KOL table (_crm_e). With `kept`, the sides are those kept (kept_stage.py),
    brought up to date by staging the rows that changed. Returns the number of rows staged, and the run whose staging
    both sides were brought up to date from (None: staged whole)."""
    staged_rows, since = 0, set()
    for name, side, source in (("_crm_k", _KOL_SIDE, kols), ("_crm_c", _CONTACT_SIDE, contacts)):
        staged = partial(side.sql, source, rules)
        if kept:
            outcome = kept_stage.stage(conn, kept, side.kept_table, staged, side.key, side.source_key, side.email, stamp,
                                       run_id, side.changes)
            staged_rows += outcome.rows
            since.add(outcome.since)
            conn.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {kept}.{side.kept_table}")
        else:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {staged('true')}")
            normalize.fold_emails(conn, name, side.email, "email_n")
            staged_rows += conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            since.add(None)
    # The email's KOL (the smallest id when KOLs share an email).
    conn.execute("""
CREATE OR REPLACE TEMP TABLE _crm_e AS
SELECT email_n, min(kol_id) AS kol_id, count(*) AS kols FROM _crm_k WHERE email_n IS NOT NULL GROUP BY email_n""")
    return int(staged_rows), since.pop() if len(since) == 1 else None


@dataclass(frozen=True)
class _Side:
    """How one side is staged: its columns (SQL over its source; the mapped fields' values follow them), its id
    (`key`, the source's `source_key`), its raw email, its kept table, and the prefix of the TEMP tables its changes
    are left in (kept_stage.Staged)."""

    columns: str
    key: str
    source_key: str
    email: str
    kept_table: str
    changes: str
    side: Literal["kol", "crm"]
    only: str = "true"  # a condition on the source's rows

    def sql(self, source: str, rules: list[FieldRule] | tuple[FieldRule, ...], where: str) -> str:
        """The staged rows of `source` meeting `where`, with h, the hash of every column but the email key."""
        return (f"SELECT *, hash(*COLUMNS(* EXCLUDE (email_n))) AS h FROM (SELECT {self.columns}, "
                f"{_side_columns(rules, self.side)} FROM {source} WHERE {self.only} AND ({where}))")


_KOL_SIDE = _Side("id AS kol_id, email AS kol_email, crm_email_ascii(email) AS email_n, full_name AS kol_name, "
                  "institution AS kol_institution", "kol_id", "id", "kol_email", "staged_kols", "_crm_changed_kols",
                  "kol", only="is_archived IS NOT TRUE")
_CONTACT_SIDE = _Side("crm_id, email AS crm_email, crm_email_ascii(email) AS email_n, "
                      "NULLIF(trim(external_id), '') AS external_id, "
                      "NULLIF(concat_ws(' ', first_name, last_name), '') AS crm_name, institution AS crm_institution, "
                      "first_name, last_name", "crm_id", "crm_id", "crm_email", "staged_contacts",
                      "_crm_changed_contacts", "crm")


def _contact_rows(conn: duckdb.DuckDBPyConnection, kept: str | None, stamp: str, run_id: str,
                  since: str | None) -> bool:
    """_crm_rows: one narrow row per contact (ids, status, kol_primary), made by _classify_sql; with `kept`, the
    kept rows of the contacts nothing touched since run `since` and the others made again (kept_stage.classify).
    Returns whether only those were made again (then the changes of both sides and the contacts classified again
    are left in TEMP tables, for _reach)."""
    if kept:
        return kept_stage.classify(conn, kept, _classify_sql, stamp, run_id, since, _CONTACT_SIDE.changes,
                                   _KOL_SIDE.changes)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_rows AS {_classify_sql('_crm_c')}")
    return False


def _classify_sql(contacts: str) -> str:
    """The classification of the staged contacts of `contacts` (all of their KOLs' contacts, for the counts), in one
    join and one aggregate per KOL. The wide columns are joined once, by _rows_sql, for the final rows: carrying them
    through the joins and the aggregate made DuckDB spill at 1M rows."""
    return f"""
WITH classified AS MATERIALIZED (
  -- email_kol: the KOL of the contact's email, else the KOL its external id names (a pair an admin confirmed).
  SELECT c.crm_id, coalesce(e.kol_id, x.kol_id) AS email_kol,
         CASE WHEN c.external_id IS NOT NULL AND x.kol_id IS NULL THEN 'orphan_in_crm'
              WHEN c.external_id IS NOT NULL AND e.kol_id IS NOT NULL AND c.external_id <> e.kol_id THEN 'id_conflict'
              WHEN e.kol_id IS NULL AND x.kol_id IS NULL THEN 'crm_only' END AS pre
  FROM {contacts} c LEFT JOIN _crm_e e ON e.email_n = c.email_n
  LEFT JOIN (SELECT kol_id FROM _crm_k) x ON x.kol_id = c.external_id
),
-- Per KOL: its remaining (unclassified) contacts and the contact it is counted on. A hash
-- aggregate joined back, not a window: a window sorts every row.
per_kol AS (
  SELECT email_kol, count(*) FILTER (WHERE pre IS NULL) AS shared,
         -- precedence digit + crm_id: a plain string min (arg_min over a struct key is several times slower)
         substr(min(CASE pre WHEN 'id_conflict' THEN '1' WHEN 'orphan_in_crm' THEN '2' ELSE '3' END || crm_id), 2)
             AS primary_crm
  FROM classified WHERE email_kol IS NOT NULL GROUP BY email_kol
)
SELECT c.crm_id, c.email_kol, p.shared,
       CASE WHEN c.email_kol IS NOT NULL THEN c.crm_id = p.primary_crm END AS kol_primary,
       CASE WHEN c.pre IS NOT NULL THEN c.pre WHEN p.shared > 1 THEN 'duplicate_in_crm' ELSE 'pair' END AS status0
FROM classified c LEFT JOIN per_kol p ON p.email_kol = c.email_kol"""


def _differences(conn: duckdb.DuckDBPyConnection, rules: list[FieldRule] | tuple[FieldRule, ...],
                 inputs: _RowInputs) -> None:
    """_crm_diff: the differences of the pairs whose raw values differ somewhere (normalized keys are computed only
    for those, a few percent of the pairs), in the one join that brings the two sides' raw values together;
    of the contacts of `inputs`."""
    raw_equal = " AND ".join(f"k.v{i} IS NOT DISTINCT FROM c.v{i}" for i in range(len(rules)))
    values = ", ".join(f"k.v{i} AS k_v{i}, c.v{i} AS c_v{i}" for i in range(len(rules)))
    phones = "".join(f", CASE WHEN k_v{i} IS DISTINCT FROM c_v{i} THEN crm_phone_national(k_v{i}) END AS kp{i}"
                     f", CASE WHEN k_v{i} IS DISTINCT FROM c_v{i} THEN crm_phone_national(c_v{i}) END AS cp{i}"
                     for i, rule in enumerate(rules) if rule.kind == "phone")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _crm_diff AS
WITH differing AS MATERIALIZED (
  SELECT c.crm_id, {values} FROM {inputs.rows} r JOIN {inputs.contacts} c USING (crm_id)
  JOIN {inputs.kols} k ON k.kol_id = r.email_kol WHERE NOT ({raw_equal})
), keyed AS MATERIALIZED (SELECT *{phones} FROM differing)
{_differences_sql(rules)}""")


@dataclass(frozen=True)
class _RowInputs:
    """What the result's rows are made from: the contacts' classification (_crm_rows), staged contacts and staged
    KOLs, and which KOL-only rows are made (a condition on _crm_lone `l`)."""

    rows: str
    contacts: str
    kols: str
    lone: str = "true"


_ALL_INPUTS = _RowInputs("_crm_rows", "_crm_c", "_crm_k")


def _dirty_inputs(conn: duckdb.DuckDBPyConnection) -> _RowInputs:
    """The inputs of the rows a night makes when it compared signatures (kept_result): the classification and staged
    contact of each contact of _crm_dirty, and the staged KOLs those contacts' rows read (by email or probable match),
    each read once from the kept tables into TEMP tables, which the differences and the rows then join."""
    conn.execute("CREATE OR REPLACE TEMP TABLE _crm_dirty_rows AS SELECT * FROM _crm_rows "
                 "WHERE crm_id IN (SELECT crm_id FROM _crm_dirty WHERE crm_id IS NOT NULL)")
    conn.execute("CREATE OR REPLACE TEMP TABLE _crm_dirty_c AS SELECT * FROM _crm_c "
                 "WHERE crm_id IN (SELECT crm_id FROM _crm_dirty_rows)")
    conn.execute("""
CREATE OR REPLACE TEMP TABLE _crm_dirty_k AS SELECT * FROM _crm_k WHERE kol_id IN (
  SELECT email_kol FROM _crm_dirty_rows
  UNION SELECT kol_id FROM _pm_match WHERE crm_id IN (SELECT crm_id FROM _crm_dirty_rows))""")
    return _RowInputs("_crm_dirty_rows", "_crm_dirty_c", "_crm_dirty_k",
                      lone="l.kol_id IN (SELECT kol_id FROM _crm_dirty WHERE crm_id IS NULL)")


# _crm_uncounted: the KOLs no contact row of the classification counts (kol_primary), with the email's first KOL.
_UNCOUNTED_KOLS = """
SELECT k.kol_id, k.h, k.email_n, k.kol_email, k.kol_name, k.kol_institution, e.kol_id AS email_first
FROM _crm_k k LEFT JOIN _crm_e e ON e.email_n = k.email_n
ANTI JOIN (SELECT email_kol FROM _crm_rows WHERE kol_primary) p ON p.email_kol = k.kol_id"""

# _crm_lone: of those, the KOLs no probable match counts either: the KOL-only rows.
_LONE_KOLS = """
SELECT *, CASE WHEN email_n IS NULL THEN 'no_email'
               WHEN kol_id <> email_first THEN 'duplicate_in_kols'
               ELSE 'missing_in_crm' END AS status
FROM _crm_uncounted u ANTI JOIN (SELECT kol_id FROM _pm_match WHERE kol_primary) p USING (kol_id)"""


def _reach(conn: duckdb.DuckDBPyConnection, org: str) -> str:
    """TEMP table _crm_reach (crm_id): the contacts whose row's signature a night can have changed, when both sides
    were staged and classified from the kept ones (so that every other contact's staged row and classification is
    the one kept) and the kept signatures stand for the stored rows: the contacts staged or classified again, and
    those with a probable match or in a duplicate set, tonight or in the stored rows. A contact whose KOL was staged
    again is among those classified again (kept_stage.classify: its email or external id is the KOL's), so any
    other contact's inputs are those of the night before. Returns its name."""
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _crm_reach AS
SELECT crm_id FROM {_CONTACT_SIDE.changes}_keys
UNION SELECT crm_id FROM {_CONTACT_SIDE.changes}_reclassified
UNION SELECT crm_id FROM _pm_match
UNION SELECT crm_id FROM _dup_sets
UNION SELECT crm_id FROM {RESULT_TABLE} WHERE org = {sql_literal(org)} AND crm_id IS NOT NULL
      AND (match_score IS NOT NULL OR duplicate_set_id IS NOT NULL)""")
    return "_crm_reach"


def _signatures(conn: duckdb.DuckDBPyConnection, reach: str | None) -> None:
    """_crm_sig (crm_id, kol_id, sig): a hash of everything _rows_sql reads to make each row (kept_result.py): of a
    contact's row, its staged contact and KOL rows (their hashes, h), its _crm_rows, _pm_match and _dup_sets rows;
    of a KOL-only row, its staged KOL, the email's first KOL and its _pm_candidates row. `reach`: only the contacts
    of that table (_reach) and every KOL-only row; else every row."""
    reached = f"WHERE r.crm_id IN (SELECT crm_id FROM {reach})" if reach else ""
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _crm_sig AS
SELECT r.crm_id, NULL::VARCHAR AS kol_id,
       hash(c.h, r.email_kol, r.shared, r.kol_primary, r.status0, m.crm_id, m.kol_id, m.kol_primary, m.score,
            m.reasons::VARCHAR, k.h, d.duplicate_set_id, d.suggested_master, d.master_reason) AS sig
FROM _crm_rows r JOIN _crm_c c USING (crm_id) LEFT JOIN _pm_match m USING (crm_id)
LEFT JOIN _crm_k k ON k.kol_id = coalesce(r.email_kol, m.kol_id) LEFT JOIN _dup_sets d USING (crm_id)
{reached}
UNION ALL
SELECT NULL, l.kol_id, hash(l.h, l.email_first, c.candidates::VARCHAR, c.review)
FROM _crm_lone l LEFT JOIN _pm_candidates c USING (kol_id)""")


@lru_cache(maxsize=1)
def _source() -> str:
    """This module's text: what makes the rows (kept_result.stamp)."""
    return inspect.getsource(sys.modules[__name__])


def _rows_sql(inputs: _RowInputs) -> str:
    """The output rows (status .. master_reason) of the contacts of `inputs` and of its KOL-only rows."""
    return f"""
SELECT CASE WHEN m.crm_id IS NOT NULL THEN 'probable_match'
            WHEN status0 = 'pair' THEN (CASE WHEN differences IS NULL THEN 'matched' ELSE 'conflict' END)
            ELSE status0 END AS status,
       coalesce(r.email_kol, m.kol_id) AS kol_id, coalesce(r.kol_primary, m.kol_primary, false) AS kol_primary,
       crm_id, external_id, c.email_n AS email_normalized, k.kol_email, crm_email, k.kol_name, crm_name,
       coalesce(k.kol_institution, crm_institution) AS institution,
       differences, differences_not_written, NULL::JSON AS candidates,
       CASE WHEN m.crm_id IS NOT NULL THEN 'probably the same person (score ' || m.score || '): '
                                           || 'commops reconcile confirm or reject ' || m.kol_id || ' ' || crm_id
            ELSE CASE status0
         WHEN 'orphan_in_crm' THEN 'external id ' || external_id || ' names no KOL'
                                   || coalesce('; email matches ' || r.email_kol, '')
         WHEN 'id_conflict' THEN 'external id names ' || external_id || ', email matches ' || r.email_kol
         WHEN 'duplicate_in_crm' THEN 'contacts sharing this email: ' || shared
         WHEN 'crm_only' THEN CASE WHEN c.email_n IS NULL THEN 'contact has no email' END
       END END AS note,
       m.score AS match_score, SCORE_BAND AS score_band, m.reasons AS match_reasons,
       m.crm_id IS NOT NULL AND m.kol_primary AS needs_review,
       d.duplicate_set_id, d.suggested_master, d.master_reason
FROM {inputs.rows} r JOIN {inputs.contacts} c USING (crm_id) LEFT JOIN _pm_match m USING (crm_id)
LEFT JOIN {inputs.kols} k ON k.kol_id = coalesce(r.email_kol, m.kol_id)
LEFT JOIN _crm_diff USING (crm_id) LEFT JOIN _dup_sets d USING (crm_id)
UNION ALL BY NAME
SELECT l.status, l.kol_id, true AS kol_primary, NULL AS crm_id, NULL AS external_id, l.email_n AS email_normalized,
       l.kol_email, NULL AS crm_email, l.kol_name, NULL AS crm_name, l.kol_institution AS institution,
       NULL::JSON AS differences, NULL::JSON AS differences_not_written, c.candidates,
       CASE WHEN l.status = 'duplicate_in_kols' THEN 'KOL ' || l.email_first || ' has the same email and is the one reconciled'
            WHEN c.review THEN 'needs review: a contact probably is this KOL (see candidates); write-back will not create it'
       END AS note,
       NULL::DOUBLE AS match_score, NULL AS score_band, NULL::JSON AS match_reasons, coalesce(c.review, false) AS needs_review,
       NULL AS duplicate_set_id, NULL AS suggested_master, NULL AS master_reason
FROM _crm_lone l LEFT JOIN _pm_candidates c USING (kol_id)
WHERE {inputs.lone}""".replace("SCORE_BAND", score_band_sql("m.score"))


def org_kols(org: str, kols_table: str = "kols") -> str:
    """The warehouse KOLs of one organization, as a relation for `reconcile`."""
    return f"(SELECT * FROM {kols_table} WHERE org = {sql_literal(org)})"


def org_contacts(org: str, kols_table: str = "kols", contacts_table: str = CONTACTS_TABLE) -> str:
    """The contacts one organization is reconciled against: its extract of the shared CRM, less the contacts
    another organization owns (their external id is another organization's active KOL, or, without an external
    id, their email is another organization's KOL's and none of this one's): here they would be orphans or
    contacts to ignore, and an admin acting on that would undo the other organization's links."""
    here, there = sql_literal(org), f"org <> {sql_literal(org)} AND is_archived IS NOT TRUE"
    # The emails of other organizations' KOLs that none of this one's has, found from those KOLs' side: a test
    # against all of this organization's KOL emails hashed every one of them (0.7 s at 1M) for what is mostly no row.
    return f"""(SELECT c.* EXCLUDE (org) FROM {contacts_table} c WHERE c.org = {here}
  AND (c.external_id IS NULL OR c.external_id NOT IN (SELECT id FROM {kols_table} WHERE {there} AND id IS NOT NULL))
  AND NOT coalesce(c.external_id IS NULL AND lower(trim(c.email)) IN (
        SELECT lower(trim(o.email)) FROM {kols_table} o WHERE o.{there} AND o.email IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {kols_table} h WHERE h.org = {here} AND h.email IS NOT NULL
                          AND lower(trim(h.email)) = lower(trim(o.email)))), false))"""
