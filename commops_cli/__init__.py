"""The `commops` command, apart from the Dagster code location (`pipelines/`).

`commops.py` builds the group (`python -m commops_cli` runs it); a module per feature holds its
commands (`sync`, `orgs`, `crm`, `webhooks`, `events`, `receiver`, `local`: demo and ui); `sync_run`,
`crm_run` and `events` run a job in-process (`in_process`: what such runs share) in the Dagster home
they share with `commops ui` (`dagster_home`); `sync_all` runs one process per organization;
`processes` stops the long-running commands and their children (SIGTERM as Ctrl-C, child process
groups); `local_service`, `crm_sandbox`, `progress_display` and `command_checks` serve the commands;
`daemon_process` starts `dagster-daemon` as a child process for the tests and benchmarks, as
`commops ui` starts `dg dev`."""
