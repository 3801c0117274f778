"""API keys (part 5): Bearer keys stored only as sha256 hashes, one organization each, with scopes.

The request gate (service/ratelimit.py) identifies the caller once per request and
puts a Principal in request.state; each endpoint then names the scope it needs with
`require_scope`. Scope per endpoint (docs/service.md):
kols:read GET /v1/kols[/{id}], kols:write POST /v1/kols, campaigns:read GET /v1/campaigns,
campaigns:write POST /v1/campaigns, products:read GET /v1/products, signals:read GET /v1/signals.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass

from fastapi import Request

from service.errors import ApiError

KEY_PREFIX = "cos_"  # keys look like cos_<43 url-safe characters>


@dataclass(frozen=True)
class Principal:
    key_id: str
    org_id: str
    plan: str
    scopes: frozenset[str]
    revoked: bool


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def bearer_token(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def lookup(conn: sqlite3.Connection, key: str) -> Principal | None:
    row = conn.execute(
        "SELECT k.id, k.org_id, k.scopes, k.revoked_at, o.plan FROM api_keys k "
        "JOIN organizations o ON o.id = k.org_id WHERE k.key_hash = ?",
        (hash_key(key),),
    ).fetchone()
    if row is None:
        return None
    scopes = frozenset(s for s in row["scopes"].split(",") if s)
    return Principal(row["id"], row["org_id"], row["plan"], scopes, row["revoked_at"] is not None)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {}, {"WWW-Authenticate": "Bearer"})


def principal(request: Request) -> Principal:
    found = getattr(request.state, "principal", None)
    if found is None:  # the gate lets no unauthenticated request through to /v1 endpoints
        raise unauthorized("Missing API key: send Authorization: Bearer <key>")
    return found


def require_scope(request: Request, scope: str) -> Principal:
    """The caller, if its key carries `scope`; else 403 insufficient_scope naming it."""
    caller = principal(request)
    if scope not in caller.scopes:
        raise ApiError(
            403,
            "insufficient_scope",
            f"This API key lacks the scope {scope}",
            {"required_scope": scope},
        )
    return caller
