"""Organizations and API keys."""

from __future__ import annotations

import sqlite3

from commops_spec.constants import ID_PREFIXES, PLANS
from service.scopes import ALL_SCOPES
from service.auth import generate_key, hash_key
from service.store.db import new_id, now_iso, transaction


class UnknownOrganization(LookupError):
    pass


def create_org(conn: sqlite3.Connection, name: str, plan: str, owner_email: str | None = None) -> str:
    if plan not in PLANS:
        raise ValueError(f"unknown plan {plan!r}; choose one of {', '.join(PLANS)}")
    org_id = new_id(ID_PREFIXES["organization"])
    with transaction(conn):
        conn.execute(
            "INSERT INTO organizations (id, name, plan, owner_email, created_at) VALUES (?, ?, ?, ?, ?)",
            (org_id, name, plan, owner_email, now_iso()),
        )
    return org_id


def get_org(conn: sqlite3.Connection, org_id: str) -> dict:
    row = conn.execute("SELECT id, name, plan, owner_email, created_at FROM organizations WHERE id = ?",
                       (org_id,)).fetchone()
    if row is None:
        raise UnknownOrganization(f"no organization {org_id!r}")
    return dict(row)


def create_key(conn: sqlite3.Connection, org_id: str, scopes: list[str] | str) -> tuple[str, str]:
    """A new key for `org_id`; returns (key_id, key). Only the hash is stored."""
    get_org(conn, org_id)
    granted = list(ALL_SCOPES) if scopes == "all" else list(dict.fromkeys(scopes))
    unknown = [s for s in granted if s not in ALL_SCOPES]
    if unknown or not granted:
        raise ValueError(f"unknown scopes {unknown}; choose from {', '.join(ALL_SCOPES)} or 'all'")
    key = generate_key()
    key_id = new_id("key_", 12)
    with transaction(conn):
        conn.execute(
            "INSERT INTO api_keys (id, org_id, key_hash, key_prefix, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (key_id, org_id, hash_key(key), key[:10], ",".join(granted), now_iso()),
        )
    return key_id, key


def list_keys(conn: sqlite3.Connection) -> list[dict]:
    rows = conn.execute(
        "SELECT k.id, k.org_id, o.name AS org_name, o.plan, k.key_prefix, k.scopes, k.created_at, k.revoked_at "
        "FROM api_keys k JOIN organizations o ON o.id = k.org_id ORDER BY k.created_at, k.id"
    ).fetchall()
    return [{**dict(r), "scopes": r["scopes"].split(",")} for r in rows]


def revoke_key(conn: sqlite3.Connection, key_id_or_prefix: str) -> str:
    """Revoke one key by id or unambiguous prefix; returns its id."""
    rows = conn.execute(
        "SELECT id FROM api_keys WHERE id = ? OR key_prefix = ? OR (length(?) >= 6 AND key_prefix LIKE ? || '%')",
        (key_id_or_prefix, key_id_or_prefix, key_id_or_prefix, key_id_or_prefix),
    ).fetchall()
    if not rows:
        raise LookupError(f"no API key with id or prefix {key_id_or_prefix!r}")
    if len(rows) > 1:
        raise LookupError(f"{key_id_or_prefix!r} matches {len(rows)} keys; give the key id")
    with transaction(conn):
        conn.execute("UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?", (now_iso(), rows[0][0]))
    return rows[0][0]
