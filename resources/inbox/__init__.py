"""The webhook inbox: every event the receiver acknowledged, in a SQLite file or in Postgres, written by
the receiver and read and marked by the sensor and the incremental job (`inbox`); its two stores
(`stores`); the event envelope it holds, read one way by the receiver and the job (`envelope`). No
Dagster here: the inbox's resource is resources/webhooks.py."""

from resources.inbox.inbox import (
    CLAIM_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    INBOX_URL_ENV,
    Inbox,
    InboxEvent,
    InboxUnreachable,
    describe_location,
    inbox_location,
    inbox_path,
    open_inbox,
    retry_delay,
)

__all__ = ["CLAIM_LEASE", "DEFAULT_MAX_ATTEMPTS", "INBOX_URL_ENV", "Inbox", "InboxEvent", "InboxUnreachable",
           "describe_location", "inbox_location", "inbox_path", "open_inbox", "retry_delay"]
