"""Failures of `apply_webhook_events` counted against its events, whichever step failed.

- `count_step_failure`, a failure hook on every step of the job (pipelines/jobs.py): a failed apply,
  publish (`analytics`) or mark (`webhooks/applied`) step raises `attempts` of every event of the
  run, so a batch that keeps failing is eventually quarantined instead of blocking the inbox.
- the run failure sensor `webhook_events_failure_sensor` (pipelines/sensors.py): a run whose process
  died (run monitoring marks it failed, and no hook ran) is counted the same way.

A run's events are the `event_ids` of its run config (the sensor and `commops events apply` always
give them); the inbox counts one failure per run, so the hook and the sensor may both report it.
"""


import dagster as dg

from assets.webhooks import event_ids_of
from webhooks.reshape import one_line
from resources.webhooks import InboxResource


def count_failure(inbox: InboxResource, run: dg.DagsterRun, error: str, log) -> None:
    ids = event_ids_of(run.run_config)
    if not ids:
        log.warning(f"run {run.run_id[:8]} names no event_ids in its config: its failure is not counted against events")
        return
    with inbox.open() as box:
        quarantined = box.mark_failed(ids, error, run_id=run.run_id)
    log.info(f"failure counted for {len(ids)} event(s) of run {run.run_id[:8]}; quarantined now: {len(quarantined)}")
    if quarantined:
        log.warning(f"quarantined after repeated failures: {', '.join(quarantined)}")


@dg.failure_hook(name="count_step_failure", required_resource_keys={"inbox"})
def count_step_failure(context: dg.HookContext) -> None:
    run = context.instance.get_run_by_id(context.run_id)
    error = one_line(context.op_exception) if context.op_exception else "the step failed"
    count_failure(context.resources.inbox, run, f"{context.step_key}: {error}", context.log)

