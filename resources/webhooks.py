"""The webhook inbox as a Dagster resource: read and marked by the sensor and the incremental job
(resources/inbox/ owns the store and its API): the receiver's SQLite file in the data
directory, or Postgres when COMMOPS_INBOX_URL is set (receivers on several hosts)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from resources.inbox import DEFAULT_MAX_ATTEMPTS, Inbox, describe_location, inbox_location


class InboxResource(dg.ConfigurableResource):
    """$COMMOPS_DATA_DIR/inbox/webhooks.db, written by `commops receiver run`; or the Postgres database
    of `url` (COMMOPS_INBOX_URL: unset here, it is read from the environment when the inbox is opened).

        with inbox.open() as box:
            box.pending(limit=500)
    """

    data_dir: str
    url: str | None = None  # postgresql://...; give it as dg.EnvVar so Dagster never stores a password
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # COMMOPS_EVENTS_MAX_ATTEMPTS

    @property
    def location(self) -> str | Path:
        # Outside a run (the commands use the resource as built) an EnvVar is still the variable's name.
        url = self.url.get_value() if isinstance(self.url, dg.EnvVar) else self.url
        return inbox_location(self.data_dir, url)

    @property
    def where(self) -> str:
        """The inbox as logs and messages name it: the file, or postgresql://HOST:PORT/DATABASE."""
        return describe_location(self.location)

    def open(self) -> Inbox:
        """The inbox (created empty when the receiver has not run yet); use it in a `with` block,
        which closes the connection."""
        return Inbox(self.location, max_attempts=self.max_attempts)
