"""Contact features kept between reconciliations, so that a night computes them only for
the contacts that changed.

A contact's features (features.py) depend on its own fields alone, so the kept row of a contact whose fields
did not change is the row a fresh computation would give. (The blocking keys are computed again from the
features each run: writing them costs more than computing them.) Each kept row
carries a fingerprint of those fields; a new contact, or one whose fingerprint differs, is computed again,
and the rows of contacts no longer extracted are dropped. The row ids that pairs join on (rid) are given
afresh each run, in id order, as features.build gives them.

The kept rows are personal data derived from the CRM: they live in a DuckDB file of their own per
organization under <data_dir>/crm-kept/ (owner-only folder), never in the warehouse that analysts get a copy
of; erasure deletes the file of an organization holding the person (the next night computes it whole again).
A stamp of the feature code's text and of the libraries it uses discards the kept rows when any of them
changes, so a kept row never outlives the code that computed it. The same file keeps the index of the last
reconciliation CSV (spliced_csv), for the same reason: the next night costs what changed.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import duckdb

from crm import features, probable
from file_modes import private_dir
from resources.sql import has_table, sql_literal, transaction

KEPT_DIR = "crm-kept"
ALIAS = "crm_kept"
FEATURES = f"{ALIAS}.contact_features"
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
    """What the kept rows were computed by: the feature, key and kept-row code's text and the libraries' versions."""
    code = (inspect.getsource(features) + inspect.getsource(probable.keys) + probable.CONTACT_SOURCE
            + inspect.getsource(build) + inspect.getsource(_keep))
    libraries = ",".join(f"{name}={version(name)}" for name in LIBRARIES)
    return hashlib.sha256((code + libraries).encode()).hexdigest()


def build(conn: duckdb.DuckDBPyConnection, contacts: str, table: str) -> int:
    """TEMP tables `table` and `table`_keys, as features.build and probable.keys make them from `contacts`,
    with the kept features of the unchanged contacts and fresh ones for the rest; the kept rows updated.
    Returns the number of contacts computed afresh."""
    _discard_if_stale(conn)
    kept = has_table(conn, ALIAS, "contact_features")
    fields = ", ".join(SOURCE_FIELDS)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_now AS SELECT crm_id AS id, hash({fields}) AS fingerprint "
                 f"FROM {contacts}")
    fresh, source = table, contacts  # nothing kept: every contact is computed, as without kept rows
    if kept:
        unchanged = "ON f.id = n.id AND f.fingerprint = n.fingerprint"
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_gone AS SELECT f.id FROM {FEATURES} f "
                     f"ANTI JOIN _kf_now n {unchanged}")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _kf_changed AS SELECT n.id FROM _kf_now n ANTI JOIN {FEATURES} f "
                     f"{unchanged}")
        fresh = "_kf_fresh"
        source = f"(SELECT * FROM {contacts} WHERE crm_id IN (SELECT id FROM _kf_changed))"
    features.build(conn, fresh, probable.CONTACT_SOURCE.format(contacts=source))
    computed = conn.execute(f"SELECT count(*) FROM {fresh}").fetchone()[0]
    columns = [row[0] for row in conn.execute(f"DESCRIBE {fresh}").fetchall()]
    _keep(conn, fresh, [c for c in columns if c != "rid"], replace=kept)
    if kept:
        # the row ids in id order, over the ids alone (a window over the whole rows costs twice as much)
        ordered = ", ".join(f'f."{c}"' if c != "rid" else "ids.rid" for c in columns)
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table} AS
WITH ids AS (SELECT id, (row_number() OVER (ORDER BY id))::INTEGER AS rid FROM {FEATURES})
SELECT {ordered} FROM {FEATURES} f JOIN ids USING (id)""")
    probable.keys(conn, table, kinds=probable.DUPLICATE_KINDS)
    for temp in ("_kf_now", "_kf_gone", "_kf_changed", "_kf_fresh"):
        conn.execute(f"DROP TABLE IF EXISTS {temp}")
    return computed


def _keep(conn: duckdb.DuckDBPyConnection, fresh: str, columns: list[str], replace: bool) -> None:
    """The kept rows: those of `fresh` with their fingerprints, in place of the changed and gone contacts' rows
    (`replace`), or as the first rows."""
    selected = ", ".join(f'f."{c}"' for c in columns)
    rows = f"SELECT {selected}, n.fingerprint FROM {fresh} f JOIN _kf_now n USING (id)"
    if not replace:
        conn.execute(f"CREATE TABLE {FEATURES} AS {rows}")
        return
    with transaction(conn):
        conn.execute(f"DELETE FROM {FEATURES} WHERE id IN (SELECT id FROM _kf_gone)")
        conn.execute(f"INSERT INTO {FEATURES} {rows}")


def _discard_if_stale(conn: duckdb.DuckDBPyConnection) -> None:
    """Drop the kept rows when the code or a library that computed them is not today's."""
    current = stamp()
    if has_table(conn, ALIAS, "stamp") and conn.execute(f"SELECT any_value(value) FROM {STAMP}").fetchone()[0] == current:
        return
    for table in (FEATURES, STAMP):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {STAMP} AS SELECT {sql_literal(current)} AS value")

