"""The `commops` command, apart from the Dagster code location (`pipelines/`).

`commops.py` builds the group (`python -m pipelines.cli` runs it); the `*_command.py` modules and
`local_commands.py` hold the commands; `sync.py` and `reconcile.py` run a job in-process for them
(`in_process.py`: what such runs share) in the Dagster home they share with `commops ui`
(`dagster_home.py`); `webhook_subscriptions.py` is the client `commops webhooks` manages the
service's webhooks with; `processes.py` stops the long-running commands and their children (SIGTERM
as Ctrl-C, child process groups); `local_service.py`, `crm_sandbox.py`, `progress_display.py` and
`command_checks.py` serve the commands; `daemon_process.py` starts `dagster-daemon` as a child
process for the tests and benchmarks, as `commops ui` starts `dagster dev`."""
