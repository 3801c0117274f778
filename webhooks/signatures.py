"""Verifying `x-service-signature`: lower-case hex HMAC-SHA256 of the exact body bytes.

The secrets come from COMMOPS_WEBHOOK_SECRETS and from the secrets file that
`commops webhooks register` writes; the file is re-read when it changes, so a rotation
(register a new webhook, delete the old one) needs no restart. Any configured secret
may match: during a rotation both the old and the new one are accepted.
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
from datetime import datetime
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger("webhooks.receiver")

_HEX_SIGNATURE = re.compile(rb"[0-9a-f]{64}")


def sign(secret: str, body: bytes) -> str:
    """The header value a correct sender puts on `body` (used by tests and the benchmark)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: bytes | None, secrets: Sequence[bytes]) -> bool:
    """True when `header` is exactly 64 lower-case hex characters equal to the HMAC of `body`
    under one of `secrets` (UTF-8 bytes). Compared as bytes in constant time; every secret is
    tried, so the time does not tell which one matched."""
    if header is None or not _HEX_SIGNATURE.fullmatch(header):
        return False
    matched = False
    for secret in secrets:
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
        matched |= hmac.compare_digest(expected, header)
    return matched


class SecretsFileError(RuntimeError):
    """The secrets file exists but cannot be read or parsed; the message says which file."""


def read_secrets_file(path: Path, now: float | None = None) -> dict[str, str]:
    """{webhook id: secret} of the secrets accepted at `now` (default: now) from the file
    `commops webhooks register` writes ({} when absent).

    Values are either the secret itself or an object with a "secret" member and, once its
    webhook is deleted, an "accept_until" time (ISO 8601): in-flight deliveries of a deleted
    webhook still verify until then."""
    return {key: secret for key, (secret, until) in _read_entries(path).items() if until is None or until > (now or time.time())}


def _read_entries(path: Path) -> dict[str, tuple[str, float | None]]:
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
        if isinstance(secret, str) and secret:
            found[webhook_id] = (secret, _epoch(until) if until else None)
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

    def __init__(self, fixed: Iterable[str], secrets_file: Path | None = None) -> None:
        self._fixed = [s.encode() for s in fixed]
        self._file = secrets_file
        self._stamp: tuple[int, int, int] | None = None
        self._from_file: list[tuple[bytes, float | None]] = []
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self._log_reloads = False  # the first load is announced by whoever starts the receiver
        self._reload_if_changed()
        self._log_reloads = True

    def current(self) -> list[bytes]:
        self._reload_if_changed()
        now = time.time()
        return self._fixed + [secret for secret, until in self._from_file if until is None or until > now]

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
            self._from_file = [(secret.encode(), until) for secret, until in entries.values()]
            self._stamp, self.last_error = stamp, None
        if self._log_reloads:  # counts only, never a secret
            log.info("secrets file %s reloaded: %d secret(s) from it, %d from COMMOPS_WEBHOOK_SECRETS",
                     self._file, len(self._from_file), len(self._fixed))
