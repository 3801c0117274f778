"""Both sides of a reconciliation as staged and classified the night before, kept, so that a night stages and
classifies only the rows that changed and those they touch.

A staged row (reconcile._stage: a KOL's or a contact's columns the reconciliation reads, its email key and a hash,
h, of the rest) depends on its source row alone, so the kept row of a source row whose staged columns hash the same
is the row staging it again would give. A night hashes every source row (cheap: nothing is written but the id and
the hash), stages the new and changed ones, folds their emails, and drops the kept rows no source row has any more;
the reconciliation then reads the staged sides where they are kept. Staging every row wrote two million wide rows
and folded a sixth of their emails in Python: about 2.3 s at 1M KOLs and contacts.

A contact's classification (reconcile._classify_sql: its email's KOL and status before the probable matches) depends
on its own email and external id, on the KOLs holding that email or that id, and on the other contacts of its KOL.
So only the contacts of three kinds can be classified otherwise than the night before: those that changed, those
whose email or external id a changed KOL holds or held, and those sharing a KOL (before or after) with one of the
first two kinds. `classify` makes those rows again, from all their KOL's contacts, and keeps the others.

The kept rows live in the organization's kept file (crm-kept/<org>.duckdb, kept_features.py), personal data like
the rest of it. Each table's state names the code that made it (`stamp`: the reconciliation's, which covers the
mapping and the normalization, and this module's) and the run whose staging it stands for. A side is staged whole
when its stamp is not today's or its kept table is not there, and when its rows are not as many as the source's after
an update (a source with two rows of one id and hash); the classification is made whole unless both sides were
updated from the very staging it was made from. Each update is one transaction with its state, so a killed night
leaves the tables of the night before or of this one, each saying which.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from crm import normalize
from resources.sql import has_table, transaction

STATE = "_state"  # <table>_state (stamp, run_id): the code that made a kept table, and the run it did so for
CLASSIFIED = "classified_contacts"  # reconcile's _crm_rows, kept


@dataclass(frozen=True)
class Staged:
    """How a side was staged: `rows` staged afresh; `since`, the run whose kept rows were brought up to date (None:
    staged whole). Then TEMP tables `<changes>_keys` (the ids whose rows changed, came or went) and `<changes>_old`
    (the ids and email keys of their kept rows before) are left for `classify`."""

    rows: int
    since: str | None


def stage(conn: duckdb.DuckDBPyConnection, kept: str, side: str, staged: Callable[[str], str], key: str,
          source_key: str, email: str, stamp: str, run_id: str, changes: str) -> Staged:
    """The staged rows with their emails folded, kept in `kept`.`side` and brought up to date for run `run_id`.
    `staged(where)`: SQL of the rows of the source meeting `where` (a condition on its columns, whose id is
    `source_key`), with the id column `key`, the raw `email`, its ASCII key email_n and the hash h."""
    table = f"{kept}.{side}"
    stamp = _stamp(stamp)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _ks_now AS SELECT {key}, h FROM ({staged('true')})")
    since = _run_of(conn, kept, side, stamp)
    if since is not None:
        # A key whose rows changed, came or went is staged again whole: two source rows of one id stay two.
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {changes}_keys AS
SELECT DISTINCT coalesce(n.{key}, k.{key}) AS {key} FROM _ks_now n FULL JOIN {table} k ON k.{key} = n.{key} AND k.h = n.h
WHERE n.{key} IS NULL OR k.{key} IS NULL""")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE {changes}_old AS SELECT {key}, email_n FROM {table} "
                     f"WHERE {key} IN (SELECT {key} FROM {changes}_keys)")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _ks_fresh AS {staged(f'{source_key} IN (SELECT {key} FROM {changes}_keys)')}")
        normalize.fold_emails(conn, "_ks_fresh", email, "email_n")
        # A row without an id cannot be found again by it: staged whole, as is a side whose rows would no longer be
        # as many.
        whole, fresh = conn.execute(f"""SELECT (SELECT count(*) FROM {table}) - (SELECT count(*) FROM {changes}_old)
            + (SELECT count(*) FROM _ks_fresh) = (SELECT count({key}) FROM _ks_now), (SELECT count(*) FROM _ks_fresh)""").fetchone()
        if whole:
            with transaction(conn):
                conn.execute(f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {changes}_keys)")
                conn.execute(f"INSERT INTO {table} SELECT * FROM _ks_fresh")
                _record(conn, kept, side, stamp, run_id)
            _drop(conn, "_ks_now", "_ks_fresh")
            return Staged(int(fresh), since)
    with transaction(conn):
        conn.execute(f"CREATE OR REPLACE TABLE {table} AS {staged('true')}")
        normalize.fold_emails(conn, table, email, "email_n")
        _record(conn, kept, side, stamp, run_id)
    _drop(conn, "_ks_now", "_ks_fresh", f"{changes}_keys", f"{changes}_old")
    return Staged(int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]), None)


def classify(conn: duckdb.DuckDBPyConnection, kept: str, classified: Callable[[str], str], stamp: str, run_id: str,
             since: str | None, contacts: str, kols: str) -> bool:
    """TEMP view _crm_rows of the kept classification of every contact of the staged `contacts`, brought up to date
    for run `run_id`. `classified(contacts)`: SQL classifying the contacts of the relation `contacts`; `since`: the
    run whose staging both sides were brought up to date from (None: a side was staged whole); `contacts` and `kols`
    the prefixes of the TEMP tables `stage` left of each side's changes. Returns whether only some contacts were
    classified again: then TEMP table `<contacts>_reclassified` (crm_id) holds them, and every other row is the one
    kept."""
    table = f"{kept}.{CLASSIFIED}"
    stamp = _stamp(stamp)
    if since is not None and _run_of(conn, kept, CLASSIFIED, stamp) == since:
        # touched: the changed contacts, and those whose email or external id a changed KOL holds or held
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _kc_touched AS
WITH emails AS (SELECT email_n FROM {kols}_old UNION SELECT email_n FROM _crm_k WHERE kol_id IN (SELECT kol_id FROM {kols}_keys))
SELECT crm_id FROM {contacts}_keys
UNION SELECT crm_id FROM _crm_c WHERE email_n IN (SELECT email_n FROM emails)
UNION SELECT crm_id FROM _crm_c WHERE external_id IN (SELECT kol_id FROM {kols}_keys)""")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _kc_first AS {classified('(SELECT * FROM _crm_c WHERE crm_id IN (SELECT crm_id FROM _kc_touched))')}")
        # and every contact of a KOL one of them had or has: its count and counted contact may move
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _kc_again AS
WITH their_kols AS (SELECT email_kol FROM {table} WHERE crm_id IN (SELECT crm_id FROM _kc_touched)
                   UNION SELECT email_kol FROM _kc_first)
SELECT crm_id FROM _kc_touched UNION SELECT crm_id FROM {table} WHERE email_kol IN (SELECT email_kol FROM their_kols)""")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _kc_rows AS {classified('(SELECT * FROM _crm_c WHERE crm_id IN (SELECT crm_id FROM _kc_again))')}")
        with transaction(conn):
            conn.execute(f"DELETE FROM {table} WHERE crm_id IN (SELECT crm_id FROM _kc_again)")
            conn.execute(f"INSERT INTO {table} SELECT * FROM _kc_rows")
            _record(conn, kept, CLASSIFIED, stamp, run_id)
        conn.execute(f"CREATE OR REPLACE TEMP TABLE {contacts}_reclassified AS SELECT crm_id FROM _kc_again")
        incremental = True
    else:
        with transaction(conn):
            conn.execute(f"CREATE OR REPLACE TABLE {table} AS {classified('_crm_c')}")
            _record(conn, kept, CLASSIFIED, stamp, run_id)
        incremental = False
    _drop(conn, "_kc_touched", "_kc_first", "_kc_again", "_kc_rows")
    conn.execute(f"CREATE OR REPLACE TEMP VIEW _crm_rows AS SELECT * FROM {table}")
    return incremental


def _stamp(stamp: str) -> str:
    """The stamp of the code that made a kept table: the reconciliation's (`stamp`) and this module's."""
    return hashlib.sha256((stamp + inspect.getsource(sys.modules[__name__])).encode()).hexdigest()


def _run_of(conn: duckdb.DuckDBPyConnection, kept: str, table: str, stamp: str) -> str | None:
    """The run the kept `table` stands for, when today's code made it; else None."""
    if not (has_table(conn, kept, table) and has_table(conn, kept, table + STATE)):
        return None
    try:
        rows = conn.execute(f"SELECT stamp, run_id FROM {kept}.{table}{STATE}").fetchall()
    except duckdb.Error:  # a state of another shape: made by other code
        return None
    return rows[0][1] if len(rows) == 1 and rows[0][0] == stamp else None


def _record(conn: duckdb.DuckDBPyConnection, kept: str, table: str, stamp: str, run_id: str) -> None:
    """The state of the kept `table`: made by today's code for run `run_id`."""
    conn.execute(f"CREATE OR REPLACE TABLE {kept}.{table}{STATE} AS SELECT ? AS stamp, ? AS run_id", [stamp, run_id])


def _drop(conn: duckdb.DuckDBPyConnection, *temps: str) -> None:
    for temp in temps:
        conn.execute(f"DROP TABLE IF EXISTS {temp}")
