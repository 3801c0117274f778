"""Verifying `x-service-signature`: lower-case hex HMAC-SHA256 of the exact body bytes.

The secrets come from COMMOPS_WEBHOOK_SECRETS and from the secrets file that
`commops webhooks register` writes; the file is re-read when it changes, so a rotation
(register a new webhook, delete the old one) needs no restart. Any configured secret
may match: during a rotation both the old and the new one are accepted.

A secret bound to an organization (`org_...=secret` in COMMOPS_WEBHOOK_SECRETS, `organization_id`
beside it in the file, written by `commops webhooks register --org NAME`) verifies only events that
name that organization: each organization's service holds its own secret, and must not be able to
write events into another's tables. An unbound secret verifies events of any organization (the
single-organization setup).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from commops_spec.constants import ID_PREFIXES, is_spec_id

log = logging.getLogger("webhooks.receiver")

_HEX_SIGNATURE = re.compile(rb"[0-9a-f]{64}")


@dataclass(frozen=True)
class Secret:
    value: bytes  # UTF-8
    organization_id: str | None = None  # org_...: verifies that organization's events only; None: any


def sign(secret: str, body: bytes) -> str:
    """The header value a correct sender puts on `body` (used by tests and the benchmark)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def well_formed(header: bytes) -> bool:
    """The header is exactly 64 lower-case hex characters (told from the header alone, before the body)."""
    return _HEX_SIGNATURE.fullmatch(header) is not None


def signers(body: bytes, header: bytes | None, secrets: Sequence[Secret]) -> set[str | None]:
    """The organizations bound to the secrets under which `header` is the HMAC of `body` (None for an
    unbound secret); empty when none matches or the header is not 64 lower-case hex characters.
    Compared as bytes in constant time; every secret is tried, so the time does not tell which one matched."""
    if header is None or not well_formed(header):
        return set()
    matched: set[str | None] = set()
    for secret in secrets:
        expected = hmac.new(secret.value, body, hashlib.sha256).hexdigest().encode()
        if hmac.compare_digest(expected, header):
            matched.add(secret.organization_id)
    return matched


def may_write(signed_by: set[str | None], organization_id: str | None) -> bool:
    """An event naming `organization_id` may be stored when an unbound secret signed it, or one bound to it."""
    return None in signed_by or (organization_id is not None and organization_id in signed_by)


def parse_secrets(text: str) -> list[Secret]:
    """COMMOPS_WEBHOOK_SECRETS: comma-separated items, each `secret` (unbound) or `org_...=secret` (bound to
    that organization); blank items dropped. An item whose text before `=` is not an organization id is an
    unbound secret as a whole."""
    found = []
    for item in (part.strip() for part in text.split(",")):
        organization_id, _, secret = item.partition("=")
        if secret and is_spec_id(organization_id, "organization"):
            found.append(Secret(secret.encode(), organization_id))
        elif item:
            found.append(Secret(item.encode()))
    return found


class SecretsFileError(RuntimeError):
    """The secrets file exists but cannot be read or parsed; the message says which file."""


class _Entry(NamedTuple):
    secret: str
    until: float | None  # epoch seconds it is accepted until; None: for good
    organization_id: str | None


def read_secrets_file(path: Path, now: float | None = None) -> dict[str, str]:
    """{webhook id: secret} of the secrets accepted at `now` (default: now) from the file
    `commops webhooks register` writes ({} when absent).

    Values are either the secret itself or an object with a "secret" member, an "organization_id"
    (org_...) when it is bound to one, and, once its webhook is deleted, an "accept_until" time
    (ISO 8601): in-flight deliveries of a deleted webhook still verify until then."""
    return {key: entry.secret for key, entry in _accepted(_read_entries(path), now).items()}


def _accepted(entries: dict[str, _Entry], now: float | None = None) -> dict[str, _Entry]:
    moment = now or time.time()
    return {key: entry for key, entry in entries.items() if entry.until is None or entry.until > moment}


def _read_entries(path: Path) -> dict[str, _Entry]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SecretsFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        entries = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise SecretsFileError(f"{path} is not valid JSON") from None
    if not isinstance(entries, dict):
        raise SecretsFileError(f"{path} must hold a JSON object keyed by webhook id")
    found = {}
    for webhook_id, value in entries.items():
        secret = value.get("secret") if isinstance(value, dict) else value
        until = value.get("accept_until") if isinstance(value, dict) else None
        organization_id = value.get("organization_id") if isinstance(value, dict) else None
        if organization_id is not None and not is_spec_id(organization_id, "organization"):
            raise SecretsFileError(f"{path}: the organization_id of {str(webhook_id)[:80]!r} is not an "
                                   f"{ID_PREFIXES['organization']}... id")
        if isinstance(secret, str) and secret:
            found[webhook_id] = _Entry(secret, _epoch(until) if until else None, organization_id)
    return found


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0  # unreadable: treat as expired


class SecretRing:
    """The secrets the receiver accepts: fixed ones plus the secrets file, reloaded on change.

    `current()` costs one stat() when the file has not changed. A file that turns unreadable
    or invalid keeps the last good set (and `last_error` says why) rather than refusing
    every delivery.
    """

    def __init__(self, fixed: Iterable[Secret], secrets_file: Path | None = None) -> None:
        self._fixed = list(fixed)
        self._file = secrets_file
        self._stamp: tuple[int, int, int] | None = None
        self._from_file: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self._log_reloads = False  # the first load is announced by whoever starts the receiver
        self._reload_if_changed()
        self._log_reloads = True

    def current(self) -> list[Secret]:
        self._reload_if_changed()
        from_file = _accepted(self._from_file).values()
        return self._fixed + [Secret(entry.secret.encode(), entry.organization_id) for entry in from_file]

    def __len__(self) -> int:
        return len(self.current())

    def _reload_if_changed(self) -> None:
        if self._file is None:
            return
        try:
            st = os.stat(self._file)
            stamp = (st.st_mtime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                entries = _read_entries(self._file) if stamp is not None else {}
            except SecretsFileError as exc:
                if self.last_error != str(exc):
                    log.warning("secrets file not reloaded, the last good one stays: %s", exc)
                self.last_error = str(exc)
                return
            self._from_file = entries
            self._stamp, self.last_error = stamp, None
        if self._log_reloads:  # counts only, never a secret
            log.info("secrets file %s reloaded: %d secret(s) from it, %d from COMMOPS_WEBHOOK_SECRETS",
                     self._file, len(self._from_file), len(self._fixed))
