"""Administration over the service database, for the CLI and tests."""

from __future__ import annotations

from pathlib import Path

from service.store import orgs
from service.store.db import connect, init_db


def _conn(db_path: str | Path):
    init_db(db_path)
    return connect(db_path)


def create_org(db_path: str | Path, name: str, plan: str, owner_email: str | None = None) -> str:
    """Create an organization; returns its org_ id."""
    conn = _conn(db_path)
    try:
        return orgs.create_org(conn, name, plan, owner_email)
    finally:
        conn.close()


def create_key(db_path: str | Path, org_id: str, scopes: list[str] | str) -> str:
    """Create an API key for `org_id` with `scopes` (a list, or "all"); returns the key (shown once)."""
    conn = _conn(db_path)
    try:
        return orgs.create_key(conn, org_id, scopes)[1]
    finally:
        conn.close()


def list_keys(db_path: str | Path) -> list[dict]:
    """Every key: id, org_id, org_name, plan, key_prefix, scopes, created_at, revoked_at (never the key)."""
    conn = _conn(db_path)
    try:
        return orgs.list_keys(conn)
    finally:
        conn.close()


def revoke_key(db_path: str | Path, key_id_or_prefix: str) -> str:
    """Revoke a key by id or prefix; returns the key id. Takes effect on the next request."""
    conn = _conn(db_path)
    try:
        return orgs.revoke_key(conn, key_id_or_prefix)
    finally:
        conn.close()
