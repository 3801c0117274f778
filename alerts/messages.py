"""One alert: the organization, the job or asset, the cause in one line, the time and the run's link.

Built only from names, counts, ids and our own one-line causes; a cause is cut to one line and any email
address in it masked, so neither a secret nor a KOL's personal data can reach a channel."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
_MAX_CAUSE = 400


def one_line(text: str) -> str:
    """The text's first non-empty line, email addresses masked, at most 400 characters."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    line = _EMAIL.sub("<email>", lines[0] if lines else "no detail")
    return line if len(line) <= _MAX_CAUSE else line[: _MAX_CAUSE - 1] + "…"


@dataclass(frozen=True)
class Alert:
    incident: str  # the incident's key: one alert per key until it is resolved
    kind: str  # run_failed, check_failed, stale, quarantined, backlog, receiver_silent, follower_stopped
    org: str
    subject: str  # "job nightly_sync", "asset warehouse/kols", "check lake/kols:ids_unique_and_prefixed", "inbox"
    cause: str  # one line
    at: str  # when it was seen (ISO 8601, UTC)
    run_id: str | None = None
    run_url: str | None = None
    resolved: bool = False  # a recovery notice

    @property
    def state(self) -> str:
        return "RECOVERED" if self.resolved else "ALERT"

    def line(self) -> str:
        """The whole alert in one line (Slack's text, the email's subject and first line)."""
        when = datetime.fromisoformat(self.at).strftime("%Y-%m-%d %H:%M UTC")
        link = f" · {self.run_url}" if self.run_url else (f" · run {self.run_id}" if self.run_id else "")
        return f"commops {self.state} · org {self.org} · {self.subject} · {self.cause} · {when}{link}"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "state": self.state, "text": self.line()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Alert:
        fields = json.loads(text)
        return cls(**{name: fields[name] for name in cls.__dataclass_fields__})
