"""No silent hang: against a host that accepts and never answers, `commops sync` fails within its deadline
(COMMOPS_API_UNRESPONSIVE_SECONDS), naming the host and the deadline, with each retry on a line of its own
(stderr is no terminal here, as under cron); `--timeout` bounds a whole run; exit codes per docs/operators.md."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
from click.testing import CliRunner

from commops_cli.commops import main
from commops_cli.run_deadline import DeadlineExpired, run_deadline
from tests.operators.silent_host import SilentHost
from tests.spec_server import SpecServer


def _commops_sync(data_dir: Path, env_overrides: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-m", "commops_cli", "sync", "--data-dir", str(data_dir), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )


def _commops_sync_here(data_dir: Path, env_overrides: dict[str, str], *args: str):
    """`commops sync` in this process (no interpreter start): stderr is no terminal either."""
    env = {k: None for k in os.environ if k.startswith(("COMMOPS_", "DAGSTER_HOME"))} | env_overrides
    return CliRunner().invoke(main, ["sync", "--data-dir", str(data_dir), *args], env=env, prog_name="commops")


def test_a_host_that_accepts_and_never_answers_fails_the_sync_within_its_deadline_in_one_line(tmp_path):
    with SilentHost() as host:
        result = _commops_sync(tmp_path / "data", {
            "COMMOPS_BASE_URL": host.base_url, "COMMOPS_API_KEY": "ck_never_shown",
            "COMMOPS_API_UNRESPONSIVE_SECONDS": "3", "COMMOPS_API_READ_TIMEOUT_SECONDS": "1",
        }, "--enrich-limit", "0")
        assert host.connections, "the sync never reached the listener"

    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    failures = [line for line in lines if line.startswith("commops sync failed")]
    assert len(failures) == 1 and failures[0] == lines[-1], result.stderr
    # Given up after 3 s of silence (not the default 120 s), every other list failing at once after it.
    assert f"127.0.0.1:{host.port} answered no request for 3 s, the deadline (COMMOPS_API_UNRESPONSIVE_SECONDS=3" \
        in failures[0]
    # What it waited for, one line per retry of the one request it tried (1 s read timeout): a log under
    # cron shows it.
    retries = lines[:-1]
    assert 1 <= len(retries) <= 3, result.stderr
    assert all(line.startswith(retries[0].split(" attempt")[0]) and " failed (ReadTimeout" in line
               and "retrying in" in line for line in retries), result.stderr
    assert "Traceback" not in result.stderr and "ck_never_shown" not in result.stderr + result.stdout


def test_timeout_bounds_a_whole_run_and_exits_124(tmp_path):
    with SilentHost() as host:
        result = _commops_sync(tmp_path / "data", {"COMMOPS_BASE_URL": host.base_url, "COMMOPS_API_KEY": "ck_x"},
                               "--enrich-limit", "0", "--timeout", "4s")

    assert result.returncode == 124, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("commops sync failed: --timeout 4s expired; the run was stopped and no partial snapshot "
                    "was published"), result.stderr
    assert "Traceback" not in result.stderr


def test_a_deadline_that_expires_inside_a_weakref_callback_is_raised_again_in_the_run():
    """Python cannot raise out of a weakref callback (it prints "Exception ignored" and goes on): the
    deadline must not be lost there, or the run would go on past --timeout."""
    class Held:
        pass

    started = time.monotonic()
    with pytest.raises(DeadlineExpired):
        with run_deadline(0.2):
            held = Held()
            reference = weakref.ref(held, lambda _: time.sleep(0.6))  # the alarm fires inside the callback
            del held  # the callback runs now
            time.sleep(5)
    assert reference() is None and time.monotonic() - started < 2


def test_a_malformed_timeout_is_a_usage_error(tmp_path):
    result = _commops_sync_here(tmp_path / "data", {}, "--timeout", "soon")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "commops sync failed: invalid value for '--timeout': 'soon' is not a duration (e.g. 90s, 45m, 2h) "
        "(see commops sync --help)"]


def test_a_failed_blocking_check_exits_3_and_a_warning_check_lands_with_one_line(tmp_path):
    with SpecServer(kols=3) as server:
        env = {"COMMOPS_BASE_URL": server.base_url, "COMMOPS_API_KEY": server.api_key}
        server.create("kols", 1, ids=("kol_x/odd",))  # kept and flagged by a warning check
        warned = _commops_sync_here(tmp_path / "warned", env, "--enrich-limit", "0")
        server.create("kols", 1, ids=("not_a_kol_id",))  # fails the snapshot's blocking id check
        blocked = _commops_sync_here(tmp_path / "blocked", env, "--enrich-limit", "0")

    assert warned.exit_code == 0, warned.stderr
    assert warned.stderr.strip().splitlines() == [
        "commops sync: WARN check warehouse/kols:ids_unique_and_prefixed failed"]
    assert blocked.exit_code == 3, blocked.stderr
    [line] = blocked.stderr.strip().splitlines()
    assert line.startswith("commops sync failed: 1 blocking asset check failed") and "ids_unique_and_prefixed" in line
