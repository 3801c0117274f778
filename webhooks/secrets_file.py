"""Writing the receiver's secrets file ($COMMOPS_DATA_DIR/webhook-secrets.json, mode 0600, a JSON
object keyed by webhook id: {"secret", "url", "organization_id" when bound, "accept_until" once
deleted}), for `commops webhooks`: atomically, so the receiver (signatures.py,
which re-reads it when it changes) sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import secrets as _secrets
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from webhooks.signatures import read_secrets_file


def generate_secret() -> str:
    """256 random bits as 64 lower-case hex characters."""
    return _secrets.token_hex(32)


def store_secret(path: Path, key: str, secret: str, **details: Any) -> None:
    """Add or replace `key` (a webhook id) in the secrets file, atomically, mode 0600."""
    entries = _read_raw(path)
    entries[key] = {"secret": secret, **details}
    _write_raw(path, entries)


def bound_organization(path: Path, key: str) -> str | None:
    """The organization id `key`'s secret is bound to (None: unbound, or no such key)."""
    entry = _read_raw(path).get(key)
    return entry.get("organization_id") if isinstance(entry, dict) else None


def rename_secret(path: Path, old_key: str, new_key: str) -> None:
    entries = _read_raw(path)
    if old_key in entries:
        entries[new_key] = entries.pop(old_key)
        _write_raw(path, entries)


def forget_secret(path: Path, key: str) -> bool:
    """Remove `key` from the secrets file; False when it was not there."""
    entries = _read_raw(path)
    if entries.pop(key, None) is None:
        return False
    _write_raw(path, entries)
    return True


def retire_secret(path: Path, key: str, grace_seconds: float) -> None:
    """Keep accepting `key`'s secret for `grace_seconds` more (attempts of a deleted webhook
    already in flight still verify), then drop it; 0 forgets it now."""
    if grace_seconds <= 0:
        forget_secret(path, key)
        return
    entries = _read_raw(path)
    if isinstance(entries.get(key), dict):
        until = datetime.now(UTC) + timedelta(seconds=grace_seconds)
        entries[key]["accept_until"] = until.strftime("%Y-%m-%dT%H:%M:%SZ")
        _write_raw(path, entries)


def _read_raw(path: Path) -> dict[str, Any]:
    read_secrets_file(path)  # validates (SecretsFileError with the file name)
    try:
        return json.loads(path.read_bytes() or b"{}")
    except FileNotFoundError:
        return {}


def _write_raw(path: Path, entries: dict[str, Any]) -> None:
    """Drop entries whose accept_until has passed, then write to a 0600 temporary file beside `path`, fsync, then rename over it: readers see
    the old or the new file, never half of one."""
    accepted = _still_accepted(entries)
    entries = {key: value for key, value in entries.items() if key in accepted}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(json.dumps(entries, indent=2, sort_keys=True).encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _still_accepted(entries: dict[str, Any]) -> set[str]:
    """Keys of `entries` still accepted now (no accept_until, or one in the future)."""
    now = datetime.now(UTC)
    keep = set()
    for key, value in entries.items():
        until = value.get("accept_until") if isinstance(value, dict) else None
        try:
            if until is None or datetime.fromisoformat(until.replace("Z", "+00:00")) > now:
                keep.add(key)
        except ValueError:
            pass
    return keep
