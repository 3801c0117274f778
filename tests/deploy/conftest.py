"""A production-shaped deployment for the tests, as docs/deploy.md runs one: Dagster's storage in a real
Postgres (deploy/dagster.yaml), the code location served by `dagster api grpc` in a process of its own,
`dagster-daemon run` in another, both reaching it through deploy/workspace.yaml; a real service
delivering signed webhooks to a real receiver whose inbox the daemon's sensor reads.

One deployment per module (the processes take seconds to start). The processes are started with
deploy/Procfile's command lines; the test's dagster.yaml is deploy/dagster.yaml with the daemon's
polling shortened (TEST_OVERRIDES), nothing else changed.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from commops_spec.constants import EVENTS
from commops_cli.daemon_process import REPO, running_process
from pipelines.definitions import make_definitions
from resources.settings import load_settings
from tests.pipeline.conftest import RunningService, start_service
from tests.pipeline.sync_support import with_orgs
from tests.pipeline.webhook_stack import WEBHOOK_SETTINGS, Stack
from tests.postgres import PostgresServer
from tests.service.webhook_support import free_port
from tests.waiting import wait_until
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings
from webhooks.subscriptions import Subscriptions

DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
START_DEADLINE = 60  # code location import on 2 shared cores
TEST_OVERRIDES = {
    "run_coordinator": {"config": {"dequeue_interval_seconds": 1}},
    "run_monitoring": {"poll_interval_seconds": 1, "free_slots_after_run_end_seconds": 1},
}
SEED = {"kols": 30, "campaigns": 4, "products": 3, "signals": 10}


def deploy_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """deploy/dagster.yaml with `overrides` merged in, mapping by mapping."""
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    _merge(config, overrides)
    return config


def procfile_command(name: str, env: dict[str, str]) -> list[str]:
    """deploy/Procfile's `name:` command line, its $VARIABLES taken from `env`, split as a shell would."""
    for line in (DEPLOY / "Procfile").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return shlex.split(re.sub(r"\$\{?(\w+)\}?", lambda match: env[match.group(1)], line.split(":", 1)[1]))
    raise KeyError(f"deploy/Procfile has no {name!r} process")


def _merge(into: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@dataclass
class Deployment:
    postgres: PostgresServer
    database: str
    home: Path
    env: dict[str, str]  # what every Dagster process of the deployment is given (no COMMOPS_* secrets)
    stack: Stack  # the service, the receiver and its inbox, the data dir, an instance on the deployment's storage
    code_server: Any  # subprocess.Popen
    daemon: Any
    logs: Path

    @property
    def instance(self) -> dg.DagsterInstance:
        return self.stack.instance

    def launch(self, job_name: str, org: str = "default") -> str:
        """`dagster job launch` of one organization's partition against deploy/workspace.yaml, as an operator
        runs a job by hand; the run id."""
        import json
        import subprocess

        run_id = str(uuid.uuid4())
        command = ["dagster", "job", "launch", "-w", "deploy/workspace.yaml", "-j", job_name, "--run-id", run_id,
                   "--tags", json.dumps({"dagster/partition": org})]
        done = subprocess.run(command, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"dagster job launch failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        return run_id

    def finished_run(self, run_id: str, timeout: float = START_DEADLINE) -> dg.DagsterRun:
        try:
            return wait_until(lambda: (run := self.instance.get_run_by_id(run_id)) and run.is_finished and run,
                              timeout=timeout, interval=0.2, what=f"run {run_id} to finish")
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.log_tails()}") from None

    def worker_pids(self, run_id: str) -> set[int]:
        """The processes that executed the run's steps."""
        events = self.instance.all_logs(run_id)
        return {event.dagster_event.pid for event in events if event.is_dagster_event and event.dagster_event.is_step_event}

    def run_rows(self, run_id: str) -> list[tuple]:
        """The run's row in Postgres, read with SQL (not through Dagster)."""
        return self.postgres.execute("SELECT pipeline_name, status FROM runs WHERE run_id = %s", self.database, (run_id,))

    def log_tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}" for log in sorted(self.logs.glob("*.log")))


@pytest.fixture(scope="module")
def deployment(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("deployment")
    database = f"dagster_{uuid.uuid4().hex[:12]}"
    postgres_url = postgres.create_database(database)
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(deploy_config(TEST_OVERRIDES), sort_keys=False))
    data_dir = root / "data"
    port = free_port()
    env = deployment_env(home, port, postgres_url)
    service = start_service(root / "service", **SEED, webhook_smtp_port=free_port(), **WEBHOOK_SETTINGS)
    receiver = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
    try:
        with Subscriptions(service.base_url, service.api_key) as subscriptions:
            subscriptions.register(receiver.url, list(EVENTS), receiver.settings.secrets_file)
        # The code location is the one process holding the service's address, its key and the data dir.
        code_env = {**env, "COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key, "COMMOPS_DATA_DIR": str(data_dir)}
        with pytest.MonkeyPatch.context() as patch, \
                running_process(procfile_command("code", code_env), code_env, root / "code_server.log") as code_server:
            patch.setenv("DAGSTER_POSTGRES_URL", postgres_url)  # this process's instance reads the same file
            wait_for_code_server(code_server, root / "code_server.log")
            with running_process(procfile_command("daemon", env), env, root / "daemon.log") as daemon, \
                    dg.DagsterInstance.from_config(str(home)) as instance:
                defs = make_definitions(load_settings(base_url=service.base_url, data_dir=data_dir))
                stack = Stack(service, receiver, data_dir, with_orgs(instance), defs)
                yield Deployment(postgres, database, home, env, stack, code_server, daemon, root)
    finally:
        receiver.stop()
        service.server.stop()


def deployment_env(home: Path, code_server_port: int, postgres_url: str | None) -> dict[str, str]:
    """What every Dagster process of a deployment is given: this environment without COMMOPS_* and
    DAGSTER_* variables, plus DAGSTER_HOME, DAGSTER_POSTGRES_URL and the code server's address."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_"))}
    return {
        **base,
        **({"DAGSTER_POSTGRES_URL": postgres_url} if postgres_url else {}),
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        "DAGSTER_HOME": str(home),
        "COMMOPS_CODE_SERVER_HOST": "127.0.0.1",
        "COMMOPS_CODE_SERVER_PORT": str(code_server_port),
    }


def wait_for_code_server(process: Any, log: Path) -> None:
    def serving() -> bool:
        assert process.poll() is None, f"the code server exited ({process.returncode}):\n{log.read_text()[-3000:]}"
        return "Started Dagster code server" in log.read_text(errors="replace")

    try:
        wait_until(serving, timeout=START_DEADLINE, interval=0.2, what="the code server")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}:\n{log.read_text()[-3000:]}") from None


def seeded_ids(service: RunningService) -> dict[str, set[str]]:
    """Every id the service holds, per list resource (the plain pager of tests/pipeline/sync_support.py)."""
    from sync.catalog import CATALOG
    from tests.pipeline.sync_support import api_items

    return {spec.table: set(api_items(service, spec)) for spec in CATALOG}
