"""Contact features kept between reconciliations, so that a night computes them only for
the contacts that changed.

A contact's features (features.py) depend on its own fields alone, so the kept row of a contact whose fields
did not change is the row a fresh computation would give. Each kept row carries a fingerprint of those fields;
a new contact, or one whose fingerprint differs, is computed again, and the rows of contacts no longer extracted
are dropped. A night reads the features where they are kept, by the row id (rid) each row keeps.

The contact-contact pass's blocking keys and the pairs they bring together are kept too (see _update_pairs):
a night makes again only the pairs its changes can touch, and scores every kept pair with its own frequencies.

The kept rows are personal data derived from the CRM: they live in a DuckDB file of their own per
organization under <data_dir>/crm-kept/ (owner-only folder), never in the warehouse that analysts get a copy
of; erasure deletes the file of an organization holding the person (the next night computes it whole again).
A stamp of the feature code's text and of the libraries it uses discards the kept rows when any of them
changes, so a kept row never outlives the code that computed it. The same file keeps the signatures of the last
result's rows (kept_result) and the index of the last reconciliation CSV (spliced_csv), for the same reason: the
next night costs what changed.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import duckdb

from crm import duplicates, features, probable
from file_modes import private_dir
from resources.sql import has_table, sql_literal, transaction

KEPT_DIR = "crm-kept"
ALIAS = "crm_kept"
FEATURES = f"{ALIAS}.contact_features"
KEYS = f"{ALIAS}.contact_keys"  # each contact's contact-contact blocking keys (id, its rid, key, probe)
PAIRS = f"{ALIAS}.duplicate_pairs"  # the contact pairs compared (a < b, by id), a row per key bringing them together
STAMP = f"{ALIAS}.stamp"
# The contact fields probable.CONTACT_SOURCE reads: the features and keys depend on these alone.
SOURCE_FIELDS = ("crm_id", "first_name", "last_name", "email", "phone", "institution", "city", "country", "department",
                 "title", "state", "last_modified", "external_id")
LIBRARIES = ("duckdb", "jellyfish", "nicknames", "phonenumbers", "anyascii", "nameparser")


def kept_path(data_dir: str | Path, org: str) -> Path:
    """The organization's file of kept contact features."""
    return Path(data_dir) / KEPT_DIR / f"{org}.duckdb"


def kept_files(data_dir: str | Path) -> list[Path]:
    """Every organization's file of kept contact features."""
    folder = Path(data_dir) / KEPT_DIR
    return sorted(folder.glob("*.duckdb")) if folder.is_dir() else []


@contextmanager
def attached(conn: duckdb.DuckDBPyConnection, data_dir: str | Path, org: str) -> Iterator[str]:
    """The organization's kept features attached to `conn` for a reconciliation; yields the alias to pass
    to reconcile(kept=...)."""
    path = kept_path(data_dir, org)
    private_dir(path.parent)
    try:
        conn.execute(f"ATTACH {sql_literal(str(path))} AS {ALIAS}")
    except duckdb.Error:  # unreadable (damaged, or written by another DuckDB): computed again from scratch
        for stale in (path, path.with_name(path.name + ".wal")):
            stale.unlink(missing_ok=True)
        conn.execute(f"ATTACH {sql_literal(str(path))} AS {ALIAS}")
    try:
        yield ALIAS
    finally:
        conn.execute(f"DETACH {ALIAS}")


@lru_cache(maxsize=1)
def stamp() -> str:
    """What the kept rows were computed by: the feature, key, pair and kept-row code's text, the pairs' bounds and
    the libraries' versions."""
    code = (inspect.getsource(features) + inspect.getsource(probable.keys) + probable.CONTACT_SOURCE
            + inspect.getsource(probable.pairs) + inspect.getsource(probable.name_compatible)
            + inspect.getsource(duplicates.name_compatible) + probable.DUPLICATE_KINDS
            + str(probable.DUPLICATE_BLOCK_CAP) + inspect.getsource(sys.modules[__name__]))
    libraries = ",".join(f"{name}={version(name)}" for name in LIBRARIES)
    return hashlib.sha256((code + libraries).encode()).hexdigest()


def build(conn: duckdb.DuckDBPyConnection, contacts: str, table: str) -> int:
    """`table`, as features.build makes it from `contacts`, with the kept features of the unchanged contacts and
    fresh ones for the rest (a TEMP view of the kept rows; on a first night a TEMP table), and duplicates.PAIRS, the
    contact pairs to compare as duplicates.candidate_pairs makes them, from the kept pairs less those the changes
    touched; the kept rows updated. Returns the number of contacts computed afresh.

    The stamp is emptied while the kept rows change and written again once they are whole, so rows left half
    updated (a killed process) are discarded by the next night rather than read."""
    _discard_if_stale(conn)
    kept = has_table(conn, ALIAS, "contact_features")
    conn.execute(f"CREATE OR REPLACE TABLE {STAMP} (value VARCHAR)")
    for (view,) in conn.execute("SELECT view_name FROM duckdb_views() WHERE temporary AND view_name = ?", [table]).fetchall():
        conn.execute(f"DROP VIEW {view}")  # a night's view of the kept rows: a first night makes a table of that name
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    fields = ", ".join(SOURCE_FIELDS)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_now AS SELECT crm_id AS id, hash({fields}) AS fingerprint "
                 f"FROM {contacts}")
    fresh, source = table, contacts  # nothing kept: every contact is computed, as without kept rows
    if kept:
        # kept rows no contact has as it is (gone or changed), and contacts with no kept row as they are, in one join
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_differ AS SELECT f.id AS kept, n.id AS now FROM {FEATURES} f "
                     "FULL JOIN _kf_now n ON f.id = n.id AND f.fingerprint = n.fingerprint "
                     "WHERE f.id IS NULL OR n.id IS NULL")
        conn.execute("CREATE OR REPLACE TEMP TABLE _kf_gone AS "
                     "SELECT kept AS id FROM _kf_differ WHERE kept IS NOT NULL")
        conn.execute("CREATE OR REPLACE TEMP TABLE _kf_changed AS "
                     "SELECT now AS id FROM _kf_differ WHERE now IS NOT NULL")
        fresh = "_kf_fresh"
        source = f"(SELECT * FROM {contacts} WHERE crm_id IN (SELECT id FROM _kf_changed))"
    features.build(conn, fresh, probable.CONTACT_SOURCE.format(contacts=source))
    computed = conn.execute(f"SELECT count(*) FROM {fresh}").fetchone()[0]
    columns = [row[0] for row in conn.execute(f"DESCRIBE {fresh}").fetchall()]
    offset = _keep(conn, fresh, columns, replace=kept)
    if kept:
        # read where they are kept: a copy of the wide rows cost 1.7 s at 1M contacts
        conn.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * EXCLUDE (fingerprint) FROM {FEATURES}")
        _update_pairs(conn, table, offset)
    else:
        _first_pairs(conn, table)
    conn.execute(f"INSERT INTO {STAMP} VALUES (?)", [stamp()])
    for temp in ("_kf_now", "_kf_differ", "_kf_gone", "_kf_changed", "_kf_fresh", "_kf_fresh_keys", "_kf_touched",
                 "_kf_new_keys", "_kf_old_keys", "_kf_moved", "_kf_m_keys", "_kf_pairs"):
        conn.execute(f"DROP TABLE IF EXISTS {temp}")
    return computed


def _keep(conn: duckdb.DuckDBPyConnection, fresh: str, columns: list[str], replace: bool) -> int:
    """The kept rows: those of `fresh` with their fingerprints, in place of the changed and gone contacts' rows
    (`replace`), or as the first rows. A row keeps its row id (rid) from night to night: the first rows take
    features.build's, in id order; later ones the next numbers, in id order among themselves. Returns what was
    added to `fresh`'s rids to make the kept ones."""
    selected = ", ".join(f'f."{c}"' for c in columns if c != "rid")
    rows = f"SELECT {selected}, f.rid + {{offset}} AS rid, n.fingerprint FROM {fresh} f JOIN _kf_now n USING (id)"
    if not replace:
        conn.execute(f"CREATE TABLE {FEATURES} AS {rows.format(offset=0)}")
        return 0
    with transaction(conn):
        offset = conn.execute(f"SELECT coalesce(max(rid), 0) FROM {FEATURES}").fetchone()[0]
        conn.execute(f"DELETE FROM {FEATURES} WHERE id IN (SELECT id FROM _kf_gone)")
        conn.execute(f"INSERT INTO {FEATURES} BY NAME {rows.format(offset=int(offset))}")
    return int(offset)


def _first_pairs(conn: duckdb.DuckDBPyConnection, table: str) -> None:
    """Every contact's keys and every pair kept, from `table` (all the contacts' features): duplicates.candidate_pairs
    with the keys that brought each pair together."""
    probable.keys(conn, table, kinds=probable.DUPLICATE_KINDS)
    conn.execute(f"CREATE TABLE {KEYS} AS SELECT f.id, rid, k.key, k.probe FROM {table}_keys k JOIN {table} f USING (rid)")
    _keyed_pairs(conn, table, table)
    conn.execute(f"DROP TABLE {table}_keys")
    conn.execute(f"CREATE TABLE {PAIRS} AS {_pairs_by_id(table)}")
    conn.execute(f"DROP TABLE IF EXISTS {duplicates.PAIRS}")
    conn.execute(f"ALTER TABLE _kf_compatible RENAME TO {duplicates.PAIRS}")


def _update_pairs(conn: duckdb.DuckDBPyConnection, table: str, offset: int) -> None:
    """The kept keys and pairs brought up to date, and duplicates.PAIRS made of them (rids of `table`).

    A pair depends on its two contacts' features and on the keys they share, each of which brings them together
    while at most DUPLICATE_BLOCK_CAP contacts hold it. So only two kinds of pair can differ from the night before:
    those of a changed or gone contact, and those of a key a contact gained or lost (its holders' count moved).
    Those rows are dropped and made again from the keys still small: every pair of a moved key, and the changed
    contacts' pairs of the keys they hold. A key held by more contacts than the cap brings no pair, so its
    holders (a common name's thousands) are never read. `offset`: what makes the fresh rows' rids the kept ones."""
    conn.execute("CREATE OR REPLACE TEMP TABLE _kf_touched AS SELECT id FROM _kf_gone UNION SELECT id FROM _kf_changed")
    probable.keys(conn, "_kf_fresh", kinds=probable.DUPLICATE_KINDS)
    conn.execute("CREATE OR REPLACE TEMP TABLE _kf_new_keys AS "
                 f"SELECT f.id, rid + {int(offset)} AS rid, k.key, k.probe "
                 "FROM _kf_fresh_keys k JOIN _kf_fresh f USING (rid)")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_old_keys AS SELECT id, key, probe FROM {KEYS} SEMI JOIN _kf_touched USING (id)")
    conn.execute("""
CREATE OR REPLACE TEMP TABLE _kf_moved AS
WITH new AS (SELECT id, key, probe FROM _kf_new_keys)
SELECT DISTINCT key FROM ((FROM _kf_old_keys EXCEPT FROM new) UNION ALL (FROM new EXCEPT FROM _kf_old_keys))""")
    with transaction(conn):
        conn.execute(f"DELETE FROM {KEYS} WHERE id IN (SELECT id FROM _kf_touched)")
        conn.execute(f"INSERT INTO {KEYS} SELECT id, rid, key, probe FROM _kf_new_keys")
    cap = int(probable.DUPLICATE_BLOCK_CAP)
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _kf_m_keys AS
WITH small AS (SELECT key FROM {KEYS} SEMI JOIN (SELECT key FROM _kf_moved UNION SELECT key FROM _kf_new_keys) USING (key)
               GROUP BY key HAVING count(*) <= {cap})
SELECT rid, key, probe FROM {KEYS} SEMI JOIN small USING (key)""")
    _keyed_pairs(conn, "_kf_m", table, by_id=True)
    conn.execute(f"""
DELETE FROM _kf_pairs WHERE key NOT IN (SELECT key FROM _kf_moved) AND a NOT IN (SELECT t.rid FROM {table} t SEMI JOIN
  _kf_touched USING (id)) AND b NOT IN (SELECT t.rid FROM {table} t SEMI JOIN _kf_touched USING (id))""")
    with transaction(conn):
        conn.execute(f"DELETE FROM {PAIRS} WHERE a IN (SELECT id FROM _kf_touched) OR b IN (SELECT id FROM _kf_touched) "
                     "OR key IN (SELECT key FROM _kf_moved)")
        conn.execute(f"INSERT INTO {PAIRS} {_pairs_by_id(table)}")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {duplicates.PAIRS} AS
SELECT DISTINCT fa.rid AS a, fb.rid AS b FROM {PAIRS} p JOIN {table} fa ON fa.id = p.a JOIN {table} fb ON fb.id = p.b""")
    conn.execute("DROP TABLE _kf_compatible")


def _keyed_pairs(conn: duckdb.DuckDBPyConnection, keyed: str, table: str, by_id: bool = False) -> None:
    """TEMP tables _kf_pairs (a, b, key), the pairs the keys of `keyed`_keys bring together (rids of `table`, a the
    contact of the smaller id, as duplicates.candidate_pairs orients them), and _kf_compatible (a, b), those of them
    that can be one person. `by_id`: the rids are not in id order (kept ones), so each pair is turned to be."""
    probable.pairs(conn, keyed, None, "_kf_pairs", kinds=probable.DUPLICATE_KINDS, cap=probable.DUPLICATE_BLOCK_CAP,
                   keyed=True)
    if by_id:
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _kf_pairs AS
SELECT CASE WHEN fa.id < fb.id THEN p.a ELSE p.b END AS a, CASE WHEN fa.id < fb.id THEN p.b ELSE p.a END AS b, p.key
FROM _kf_pairs p JOIN {table} fa ON fa.rid = p.a JOIN {table} fb ON fb.rid = p.b""")
    conn.execute("CREATE OR REPLACE TEMP TABLE _kf_compatible AS SELECT DISTINCT a, b FROM _kf_pairs")
    duplicates.name_compatible(conn, "_kf_compatible", table)


def _pairs_by_id(table: str) -> str:
    """The rows of _kf_pairs whose pair is in _kf_compatible, by contact id (a < b)."""
    return (f"SELECT fa.id AS a, fb.id AS b, p.key FROM _kf_pairs p SEMI JOIN _kf_compatible c ON c.a = p.a AND c.b = p.b "
            f"JOIN {table} fa ON fa.rid = p.a JOIN {table} fb ON fb.rid = p.b")


def _discard_if_stale(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop the kept rows when the code or a library that computed them is not today's, or they were left half
    updated."""
    current = stamp()
    if has_table(conn, ALIAS, "stamp") and conn.execute(f"SELECT any_value(value) FROM {STAMP}").fetchone()[0] == current:
        return
    for table in (FEATURES, KEYS, PAIRS, STAMP):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
