"""`commops events apply` and `follow`: apply_webhook_events runs in this process (`run_apply`: batch after batch
until no event is ready), and their settings and resources (`apply_setup`). Apart from the commands
(commops_cli/events.py) so that `events status` and `retry` answer without importing Dagster."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import dagster as dg

from assets.webhooks import WEBHOOK_EVENTS_KEY, ApplyResult, run_config
from commops_cli.command_checks import prepare_data_dir
from commops_cli.in_process import job_runner
from pipelines.definitions import build_resources
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from resources.orgs import DEFAULT_ORG
from resources.orgs_resource import OrgsResource
from resources.settings import API_KEY_ENV, Settings, load_settings
from resources.webhooks import InboxResource
from webhooks.organizations import route_events, unknown_organization
from webhooks.routing import BATCH_LIMIT


class ApplyError(RuntimeError):
    """`commops events apply` failed; the message is one line saying why (the events stay pending)."""


@dataclass
class ApplySummary:
    runs: int = 0
    events: int = 0  # applied
    quarantined: list[str] = field(default_factory=list)
    by_kind: Counter = field(default_factory=Counter)
    rows_written: Counter = field(default_factory=Counter)
    counts: dict[str, int] = field(default_factory=dict)  # the inbox's, at the end

    def add(self, run: ApplyResult | None) -> None:
        """What one run applied (None: its asset was not materialized)."""
        if run is not None:
            self.events += run.applied
            self.quarantined += run.quarantined_ids
            self.by_kind.update(run.events_by_kind)
            self.rows_written.update(run.rows_written)


def apply_setup(base_url: str | None, data_dir: str | None, api_key_env: str) -> tuple[Settings, dict]:
    """The settings and resources of in-process apply runs; ApplyError when the data directory is not writable."""
    settings = load_settings(base_url=base_url, data_dir=data_dir)
    try:
        prepare_data_dir(settings)
    except OSError as error:
        raise ApplyError(f"cannot write to the data directory {settings.data_dir}: {error.strerror or error}") from None
    return settings, build_resources(settings, api_key_env=api_key_env)


def run_apply(
    base_url: str | None = None,
    data_dir: str | None = None,
    api_key_env: str = API_KEY_ENV,
    limit: int = BATCH_LIMIT,
    instance: dg.DagsterInstance | None = None,
) -> ApplySummary:
    """Run apply_webhook_events in-process, batch after batch and organization by organization (explicit
    event ids, as the sensor gives them), until no event is ready; events of no registered organization
    are quarantined; ApplyError when a run fails."""
    settings, resources = apply_setup(base_url, data_dir, api_key_env)
    inbox: InboxResource = resources["inbox"]
    orgs: OrgsResource = resources["orgs"]
    summary = ApplySummary()
    logging.getLogger("commops").setLevel(logging.INFO)
    previous: list[str] = []
    with job_runner(settings, resources, instance, marts=False) as runner:
        while True:
            known = orgs.all()
            with inbox.open() as box:
                routed, unknown = route_events(box.pending(limit=limit * max(len(known), 1)), known)
                for event in unknown:
                    box.quarantine([event.id], unknown_organization(event))
            summary.quarantined += [event.id for event in unknown]
            batch = [event.id for events in routed.values() for event in events]
            if not batch:
                break
            if batch == previous:  # each run settles its batch (applied, quarantined or waiting): never seen
                raise ApplyError(f"{len(batch)} event(s) still pending after a run that succeeded, e.g. {batch[0]}")
            previous = batch
            for org, events in sorted(routed.items()):
                if org == DEFAULT_ORG:
                    next(o for o in known if o.name == org).api_key()  # SettingsError naming its variable
                run = runner.run(APPLY_WEBHOOK_EVENTS, run_config=run_config([e.id for e in events][:limit]),
                                 partition=org)
                summary.runs += 1
                if not run.success:
                    raise ApplyError(f"{org}: {run.failure}")
                summary.add(run.output(WEBHOOK_EVENTS_KEY, ApplyResult))
    with inbox.open() as box:
        summary.counts = box.counts()
    return summary
