"""The signatures of the last result's rows, kept between reconciliations, so that a night makes only the rows
whose inputs changed.

A row of the result is a function of a few staged rows: a contact's row of its staged contact, its KOL, its
classification, its probable match and its duplicate set; a KOL-only row of its staged KOL, the email's first KOL
and its candidates (reconcile._signatures hashes exactly these). A row whose signature is the one kept is the
row stored, so a night makes and writes only the rows with a new signature and deletes the rows of the signatures
gone; the result is the same either way (tests/crm/test_kept_features.py compares it with a run from scratch).

The signatures stand for the rows stored only while nothing else changed them: the kept state names the run whose
rows they are and how many there are, and the stamp of the code that made both. Anything else (an erasure
rebuilding the warehouse, a run without the kept file, another version of the code) and the night makes every row,
comparing them with the stored ones as without a kept file. The state is emptied while the signatures change and
written once they are whole; the warehouse and the kept file are two databases, so a night killed between their
commits leaves a state naming another run, which is discarded the same way.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Sequence
from importlib.metadata import version

import duckdb

from crm import normalize, tables
from resources.sql import has_table, transaction

SIGNATURES = "result_signatures"  # (crm_id, kol_id, sig): a contact's row by crm_id, a KOL-only row by kol_id
STATE = "result_state"  # (run_id, rows, stamp) of the rows the signatures stand for
SAME_ROW = "o.sig = n.sig AND o.crm_id IS NOT DISTINCT FROM n.crm_id AND o.kol_id IS NOT DISTINCT FROM n.kol_id"


def stamp(rows_code: str, mapping: Sequence[object]) -> str:
    """What made the rows and their signatures: the row code (`rows_code`, reconcile's source), the normalization
    it calls, the result's columns, the field mapping and DuckDB (its hash)."""
    code = "\x1f".join([rows_code, inspect.getsource(normalize), inspect.getsource(tables),
                        inspect.getsource(sys.modules[__name__]), repr(list(mapping)), version("duckdb")])
    return hashlib.sha256(code.encode()).hexdigest()


def usable(conn: duckdb.DuckDBPyConnection, kept: str, org: str, stamp_now: str) -> bool:
    """The kept signatures stand for the organization's stored rows: same run, as many rows, today's code."""
    if not (has_table(conn, kept, STATE) and has_table(conn, kept, SIGNATURES)):
        return False
    state = conn.execute(f"SELECT run_id, rows, stamp FROM {kept}.{STATE}").fetchall()
    if len(state) != 1 or state[0][2] != stamp_now:
        return False
    run_id, rows = state[0][0], state[0][1]
    stored = conn.execute(f"SELECT count(*), min(run_id), max(run_id) FROM {tables.RESULT_TABLE} WHERE org = ?",
                          [org]).fetchone()
    return stored == (rows, run_id, run_id)


def compare(conn: duckdb.DuckDBPyConnection, kept: str, signatures: str, reach: str | None = None) -> None:
    """TEMP tables _crm_dirty (crm_id, kol_id, sig): the rows of `signatures` not kept, to be made; and _crm_stale
    (row, crm_id, kol_id): the kept rows whose signature is gone, to be deleted. `reach`: a table of the contacts
    (crm_id) whose signatures `signatures` holds, with every KOL-only row's; the kept signatures of other contacts
    are left as they are."""
    reached = f" WHERE crm_id IS NULL OR crm_id IN (SELECT crm_id FROM {reach})" if reach else ""
    old = f"(SELECT rowid AS row, crm_id, kol_id, sig FROM {kept}.{SIGNATURES}{reached})"
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_dirty AS SELECT n.* FROM {signatures} n ANTI JOIN {old} o ON {SAME_ROW}")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_stale AS SELECT o.row, o.crm_id, o.kol_id "
                 f"FROM {old} o ANTI JOIN {signatures} n ON {SAME_ROW}")


def record(conn: duckdb.DuckDBPyConnection, kept: str, signatures: str, run_id: str, stamp_now: str,
           compared: bool) -> None:
    """The kept signatures made those of `signatures`, the rows of run `run_id`: by the changes compare() found
    (`compared`), else all of them."""
    conn.execute(f"CREATE OR REPLACE TABLE {kept}.{STATE} (run_id VARCHAR, rows BIGINT, stamp VARCHAR)")
    if compared:
        with transaction(conn):
            conn.execute(f"DELETE FROM {kept}.{SIGNATURES} WHERE rowid IN (SELECT row FROM _crm_stale)")
            conn.execute(f"INSERT INTO {kept}.{SIGNATURES} SELECT crm_id, kol_id, sig FROM _crm_dirty")
    else:
        conn.execute(f"CREATE OR REPLACE TABLE {kept}.{SIGNATURES} AS SELECT crm_id, kol_id, sig FROM {signatures}")
    rows = conn.execute(f"SELECT count(*) FROM {kept}.{SIGNATURES}").fetchone()[0]
    conn.execute(f"INSERT INTO {kept}.{STATE} VALUES (?, ?, ?)", [run_id, rows, stamp_now])
