"""Postgres URLs given in settings (COMMOPS_INBOX_URL, COMMOPS_ORGS_URL): what may be shown of one,
and the one-line error when a connection cannot be made, with its password masked wherever the
driver's message repeats it (libpq quotes a malformed part of the URL, e.g. a bad %-escape)."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

MASK = "***"


def redacted(url: str) -> str:
    """`postgresql://HOST:PORT/DATABASE`: what may be logged of a URL (no user, no password, no options)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # an unbalanced [ or a port that is not a number
        return "postgresql://(an invalid URL)"
    shown_port = f":{port}" if port else ""
    return f"postgresql://{host or 'localhost'}{shown_port}{parts.path or '/'}"


def masked(text: str, url: str) -> str:
    """`text` with the URL's password, as written and as decoded, replaced by ***."""
    for secret in sorted(_passwords(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def connection_error(setting: str, url: str, error: BaseException) -> str:
    """One line: `setting` cannot be connected to, where (without credentials) and the driver's reason."""
    lines = str(error).strip().splitlines()
    reason = masked(lines[0], url) if lines else type(error).__name__
    return f"{setting}: cannot connect to {redacted(url)} ({reason})"


def _passwords(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:  # unparsable: the whole user info is masked
        written = {url.split("://", 1)[-1].rsplit("@", 1)[0]} if "@" in url else set()
    else:  # libpq also takes ?password=...
        written = {parts.password or "", *parse_qs(parts.query).get("password", [])}
    return {form for secret in written for form in (secret, unquote(secret)) if form}
