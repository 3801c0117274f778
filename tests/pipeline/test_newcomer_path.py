"""The path a new user walks: one Dagster home for the CLI and the UI, one-line errors before any work.
(The README's walkthroughs after `commops demo`: test_demo.py, on the demo's data.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.pipeline.sync_support import with_orgs

REPO = Path(__file__).resolve().parents[2]


def _commops(*args: str, env_overrides: dict[str, str] | None = None, timeout: float = 180,
             cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env.update(env_overrides or {}, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "commops_cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _one_line(result: subprocess.CompletedProcess, exit_code: int) -> str:
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_cli_sync_is_recorded_in_the_dagster_home_the_ui_opens(make_service, tmp_path):
    from commops_cli.dagster_home import prepare_home
    from resources.settings import load_settings

    service = make_service(kols=30, campaigns=2, products=2, signals=3)
    data_dir = tmp_path / "data"
    result = _commops("sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts",  # the marts: test_marts.py
                      env_overrides={"COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key})
    assert result.returncode == 0, result.stderr

    home = data_dir / "dagster_home"
    previous = os.environ.pop("DAGSTER_HOME", None)
    try:
        assert prepare_home(load_settings(data_dir=str(data_dir))) == home  # what `commops ui` starts dagster dev with
    finally:
        if previous is not None:
            os.environ["DAGSTER_HOME"] = previous
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        for key in (["lake", "kols"], ["warehouse", "kols"], ["warehouse", "kol_details"], ["analytics"]):
            assert instance.get_latest_materialization_event(dg.AssetKey(key)) is not None, key
        (run,) = instance.get_runs()
        assert run.job_name == "nightly_sync" and run.is_success
    finally:
        instance.dispose()


def test_a_base_url_without_v1_is_refused_naming_the_fix(tmp_path):
    line = _one_line(_commops("sync", "--data-dir", str(tmp_path / "data"), "--base-url", "http://127.0.0.1:9",
                              env_overrides={"COMMOPS_API_KEY": "x"}), 1)
    assert line == ("commops sync failed: COMMOPS_BASE_URL=http://127.0.0.1:9 lacks the version segment: "
                    "the address includes /v1 (e.g. http://127.0.0.1:9/v1)")


def test_under_dagster_dev_a_base_url_without_v1_fails_the_run_with_the_same_line(tmp_path, monkeypatch):
    """The code location reads COMMOPS_BASE_URL at run time (no CLI check before): the resource checks it."""
    from commops_cli.in_process import failure_message
    from pipelines.definitions import defs

    monkeypatch.setenv("COMMOPS_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("COMMOPS_API_KEY", "x")
    monkeypatch.setenv("COMMOPS_DATA_DIR", str(tmp_path))
    job = defs().resolve_job_def("nightly_sync")
    result = job.execute_in_process(instance=with_orgs(dg.DagsterInstance.ephemeral()), partition_key="default",
                                    raise_on_error=False)
    assert not result.success
    assert failure_message(result) == ("COMMOPS_BASE_URL=http://127.0.0.1:9 lacks the version segment: "
                                       "the address includes /v1 (e.g. http://127.0.0.1:9/v1)")


def test_an_invalid_option_is_refused_before_any_work(tmp_path):
    data_dir = tmp_path / "data"
    line = _one_line(_commops("sync", "--data-dir", str(data_dir), "--enrich-limit", "-5",
                              env_overrides={"COMMOPS_BASE_URL": "http://127.0.0.1:9/v1", "COMMOPS_API_KEY": "x"}), 2)
    assert line.startswith("commops sync failed: invalid value for '--enrich-limit': -5 is not in the range x>=0")
    assert not data_dir.exists()


def test_a_service_that_is_not_there_fails_within_seconds_with_its_address(tmp_path):
    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    result = _commops("sync", "--data-dir", str(tmp_path / "data"), "--no-progress", "--base-url", base_url,
                      env_overrides={"COMMOPS_API_KEY": "x"}, timeout=60)
    line = _one_line(result, 1)
    assert line.startswith(f"commops sync failed: cannot connect to {base_url} (")


def test_an_invalid_timezone_names_the_variable(tmp_path):
    line = _one_line(_commops("sync", "--data-dir", str(tmp_path / "data"),
                              env_overrides={"COMMOPS_BASE_URL": "http://127.0.0.1:9/v1", "COMMOPS_API_KEY": "x",
                                             "COMMOPS_TIMEZONE": "Mars/Olympus"}), 1)
    assert line == "commops sync failed: COMMOPS_TIMEZONE='Mars/Olympus' is not a known IANA timezone"


def test_demo_with_a_data_dir_it_cannot_write_says_so_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    line = _one_line(_commops("demo", "--data-dir", str(blocker / "data")), 1)
    assert line.startswith(f"commops demo failed: cannot write to the data directory {blocker / 'data'}: ")


@pytest.mark.parametrize(
    ("args", "written"),
    [(("events", "status"), "inbox"), (("receiver", "run", "--port", "{port}"), "inbox"),
     (("service", "run", "--port", "{port}"), "service")],
    ids=["pipeline", "receiver", "service"],
)
def test_an_empty_commops_data_dir_means_the_default_data_directory_not_the_current_one(tmp_path, args, written):
    with socket.socket() as taken:  # the servers stop at their port, after opening the data directory
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        _commops(*(arg.format(port=port) for arg in args), env_overrides={"COMMOPS_DATA_DIR": ""}, cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert (tmp_path / "data" / written).is_dir()


@pytest.mark.parametrize("command", ["ui", "demo"])
def test_a_port_in_use_is_refused_in_one_line(tmp_path, command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--port", str(port)] + (["--serve"] if command == "demo" else [])
        line = _one_line(_commops(command, "--data-dir", str(tmp_path / "data"), *args,
                                  env_overrides={"COMMOPS_BASE_URL": "http://127.0.0.1:9/v1"}), 1)
    assert line == f"commops {command} failed: port {port} on 127.0.0.1 is in use (choose another with --port)"


def _modules_loaded(*args: str, env_overrides: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`commops ARGS` run in a fresh interpreter, and its output's words: the last says whether it had imported Dagster
    when it exited."""
    program = ("import atexit, sys; atexit.register(lambda: print('dagster' in sys.modules)); "
               "from commops_cli.commops import main; main(prog_name='commops')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    done = subprocess.run([sys.executable, "-c", program, *args], env={**env, **env_overrides},
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    return done, done.stdout.split()


def test_commops_help_lists_every_command_as_click_would_without_importing_them(monkeypatch):
    import click
    from click.testing import CliRunner

    from commops_cli.commops import COMMANDS, OneLineErrors, main

    done, loaded = _modules_loaded("--help", env_overrides={})
    assert done.returncode == 0 and loaded[-1] == "False", done.stderr
    assert all(f"\n  {name} " in done.stdout for name in COMMANDS)
    listed = CliRunner().invoke(main, ["--help"], terminal_width=100).output
    monkeypatch.setattr(OneLineErrors, "format_commands", click.Group.format_commands)  # click's: imports each one
    assert listed == CliRunner().invoke(main, ["--help"], terminal_width=100).output


def test_a_sync_refused_on_its_settings_answers_before_loading_dagster(tmp_path):
    """The settings are checked before the pipeline (Dagster, the code location) is imported, so a refused
    sync answers at once instead of after seconds of imports."""
    done, loaded = _modules_loaded("sync", "--data-dir", str(tmp_path / "data"),
                                   env_overrides={"COMMOPS_API_KEY": "anything"})
    assert done.returncode == 1 and "COMMOPS_BASE_URL is not set" in done.stderr, done.stderr
    assert loaded == ["False"]


@pytest.mark.parametrize("command", [["orgs", "list"], ["events", "status"]])
def test_the_commands_that_only_read_the_registry_or_the_inbox_answer_without_loading_dagster(tmp_path, command):
    done, loaded = _modules_loaded(*command, "--data-dir", str(tmp_path / "data"), env_overrides={})
    assert done.returncode == 0, done.stderr
    assert loaded[-1] == "False"
