"""The exit codes of `commops sync` (and `sync --all`), as docs/operators.md lists them for cron and monitors."""

LANDED = 0  # the snapshot landed; checks that only warn print one line each
FAILED = 1  # the run failed (the API, a setting, the data directory...): one line says why
USAGE = 2  # click's: an unknown option, a bad value
BLOCKING_CHECKS_FAILED = 3  # a blocking data-quality check failed: that table was not loaded
TIMED_OUT = 124  # `--timeout` expired and the run was stopped (the code coreutils' `timeout` uses)
INTERRUPTED = 130  # Ctrl-C or SIGTERM
