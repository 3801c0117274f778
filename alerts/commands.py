"""The alerts' checks as the commands run them under cron, with no daemon: after `commops sync` ends, the
run it ran and the inbox are reviewed and what is owed delivered, on the store the sensors share.
Alerting never changes how the command ends: a problem with it is one line on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg

from alerts.alerter import opened_alerter
from alerts.watch import review_inbox, review_run
from resources.orgs import Org
from resources.settings import SettingsError
from resources.inbox import Inbox, InboxUnreachable
from resources.inbox.stores import is_postgres_url


def review_after_run(instance: dg.DagsterInstance, run_id: str, inbox: str | Path, orgs: list[Org]) -> None:
    try:
        with opened_alerter(inbox) as alerter:
            run = instance.get_run_by_id(run_id)
            if run is not None:
                review_run(instance, run, alerter)
            if is_postgres_url(inbox) or Path(inbox).exists():  # no receiver ever ran here: no backlog, no file made
                with Inbox(inbox) as box:
                    review_inbox(box, orgs, alerter)
            alerter.deliver()
    except (SettingsError, InboxUnreachable) as error:
        print(f"alerts not checked: {error}", file=sys.stderr)
