"""The webhook inbox as a Dagster resource: the receiver's SQLite file, read and marked by the
sensor and the incremental job (webhook_receiver/inbox.py owns the file and its API)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from webhook_receiver.inbox import DEFAULT_MAX_ATTEMPTS, Inbox, inbox_path


class InboxResource(dg.ConfigurableResource):
    """$COMMOPS_DATA_DIR/inbox/webhooks.db, written by `commops receiver run`.

        with inbox.open() as box:
            box.pending(limit=500)
    """

    data_dir: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # COMMOPS_EVENTS_MAX_ATTEMPTS

    @property
    def path(self) -> Path:
        return inbox_path(self.data_dir)

    def open(self) -> Inbox:
        """The inbox (created empty when the receiver has not run yet); use it in a `with` block,
        which closes the connection."""
        return Inbox(self.path, max_attempts=self.max_attempts)
