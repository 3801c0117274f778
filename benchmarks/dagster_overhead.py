"""Dagster's per-run overhead with its storage in Postgres (deploy/dagster.yaml) versus SQLite.

    .venv/bin/python benchmarks/dagster_overhead.py [--runs 5] [--kols 2000]

Two instances, identical but for storage: deploy/dagster.yaml on a throwaway Postgres
(tests/postgres.py) and the same file without its `storage` block (Dagster's SQLite default, as the
repo's dagster.yaml has). Two jobs: `noop` (one op doing nothing: its whole time is overhead) and
`nightly_sync` against a local service seeded with `--kols` KOLs (each instance its own data dir).
Measured two ways, storages alternating run by run, medians of `--runs`:

- in process: `execute_in_process` on each instance, wall time in this process (storage writes only);
- deployed: the code-location server and `dagster-daemon` of deploy/Procfile per instance (both up
  at once), each run submitted with `dagster job launch` and timed from its creation to its end in
  Dagster's run record (queue, launch, a new run-worker process, execution). The run queue is polled
  every second in both (`dequeue_interval_seconds: 1`), so queue waits are comparable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

from benchmarks.overhead_location import NOOP, noop  # noqa: E402
from commops_cli.daemon_process import REPO, running_process  # noqa: E402
from pipelines.definitions import make_definitions  # noqa: E402
from pipelines.jobs import NIGHTLY_SYNC  # noqa: E402
from resources.settings import load_settings  # noqa: E402
from tests.deploy.conftest import deploy_config, deployment_env, procfile_command, wait_for_code_server  # noqa: E402
from tests.pipeline.conftest import start_service  # noqa: E402
from tests.pipeline.sync_support import api_key_in_env  # noqa: E402
from tests.postgres import running_postgres  # noqa: E402
from tests.service.webhook_support import free_port  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

STORAGES = ("sqlite", "postgres")
JOBS = (NOOP, NIGHTLY_SYNC)
QUEUE = {"run_coordinator": {"config": {"dequeue_interval_seconds": 1}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kols", type=int, default=2000)
    args = parser.parse_args()
    print("command:", " ".join([os.path.relpath(sys.executable), *sys.argv]))

    with tempfile.TemporaryDirectory(prefix="dagster-overhead-") as tmp, running_postgres() as postgres, ExitStack() as stack:
        root = Path(tmp)
        service = start_service(root / "service", kols=args.kols, campaigns=args.kols // 20, products=20, signals=args.kols)
        stack.callback(service.server.stop)
        homes = {name: make_home(root / name, postgres.create_database("dagster") if name == "postgres" else None) for name in STORAGES}
        os.environ["DAGSTER_POSTGRES_URL"] = homes["postgres"].postgres_url  # this process's instances read it too
        print(f"service: {args.kols} KOLs; Postgres {postgres.bin_dir.parent.name} on 127.0.0.1 (fsync off)")

        in_process = measure(args.runs, lambda storage, job: run_in_process(homes[storage], job, service))
        report("in process (execute_in_process: storage writes only)", in_process)

        deployments = {name: stack.enter_context(Deployed(homes[name], service)) for name in STORAGES}
        deployed = measure(args.runs, lambda storage, job: deployments[storage].run(job))
        report("deployed (dagster job launch -> queue -> daemon -> code server -> run worker process)", deployed)


@dataclass(frozen=True)
class Home:
    path: Path  # DAGSTER_HOME
    postgres_url: str | None  # None: SQLite

    @property
    def data_dir(self) -> Path:
        return self.path.parent / f"{self.path.name}-data"


def make_home(path: Path, postgres_url: str | None) -> Home:
    """A DAGSTER_HOME with deploy/dagster.yaml, on Postgres or (without its storage block) on SQLite."""
    path.mkdir(parents=True)
    config = deploy_config(QUEUE)
    if postgres_url is None:
        del config["storage"]
    (path / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return Home(path, postgres_url)


def run_in_process(home: Home, job_name: str, service) -> float:
    settings = load_settings(base_url=service.base_url, data_dir=home.data_dir, enrich_details_limit=0)
    job = noop if job_name == NOOP else make_definitions(settings).resolve_job_def(NIGHTLY_SYNC)
    with dg.DagsterInstance.from_config(str(home.path)) as instance, api_key_in_env(service.api_key):
        started = time.perf_counter()
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        seconds = time.perf_counter() - started
    assert result.success, f"{job_name} failed in process"
    return seconds


class Deployed:
    """The code server (serving benchmarks.overhead_location) and the daemon of one home."""

    def __init__(self, home: Home, service):
        self.home, self.service, self.stack = home, service, ExitStack()

    def __enter__(self) -> "Deployed":
        port = free_port()
        self.env = deployment_env(self.home.path, port, self.home.postgres_url)
        code_env = {**self.env, "COMMOPS_BASE_URL": self.service.base_url, "COMMOPS_API_KEY": self.service.api_key,
                    "COMMOPS_DATA_DIR": str(self.home.data_dir), "COMMOPS_ENRICH_DETAILS_LIMIT": "0"}
        code = [part.replace("pipelines.definitions", "benchmarks.overhead_location") for part in procfile_command("code", code_env)]
        log = self.home.path / "code_server.log"
        wait_for_code_server(self.stack.enter_context(running_process(code, code_env, log)), log)
        self.workspace = self.home.path / "workspace.yaml"
        self.workspace.write_text((REPO / "deploy" / "workspace.yaml").read_text().replace("pipelines.definitions", "benchmarks.overhead_location"))
        daemon = ["dagster-daemon", "run", "-w", str(self.workspace)]
        self.stack.enter_context(running_process(daemon, self.env, self.home.path / "daemon.log"))
        self.instance = self.stack.enter_context(dg.DagsterInstance.from_config(str(self.home.path)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stack.close()

    def run(self, job_name: str) -> float:
        run_id = str(uuid.uuid4())
        command = ["dagster", "job", "launch", "-w", str(self.workspace), "-j", job_name, "--run-id", run_id]
        subprocess.run(command, cwd=REPO, env=self.env, check=True, capture_output=True, timeout=120)
        record = wait_until(lambda: (r := self.instance.get_run_record_by_id(run_id)) and r.dagster_run.is_finished and r,
                            timeout=300, interval=0.1, what=f"{job_name} run {run_id}")
        assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, f"{job_name} run {run_id} {record.dagster_run.status}"
        return record.end_time - record.create_timestamp.timestamp()


def measure(runs: int, once: Callable[[str, str], float]) -> dict[tuple[str, str], list[float]]:
    """Every job on every storage, storages alternating, `runs` times (one warm-up each first, not counted)."""
    seconds: dict[tuple[str, str], list[float]] = {(s, j): [] for s in STORAGES for j in JOBS}
    for round_ in range(runs + 1):
        for job in JOBS:
            for storage in STORAGES if round_ % 2 else reversed(STORAGES):
                taken = once(storage, job)
                if round_:
                    seconds[(storage, job)].append(taken)
    return seconds


def report(title: str, seconds: dict[tuple[str, str], list[float]]) -> None:
    print(f"\n{title}, medians of {len(next(iter(seconds.values())))} runs:")
    for job in JOBS:
        sqlite, postgres = (statistics.median(seconds[(s, job)]) for s in STORAGES)
        runs = ", ".join(f"{s}: " + " ".join(f"{v:.2f}" for v in seconds[(s, job)]) for s in STORAGES)
        print(f"  {job:12} SQLite {sqlite:6.2f} s  Postgres {postgres:6.2f} s  Postgres/SQLite {postgres / sqlite:.2f}  ({runs})")


if __name__ == "__main__":
    main()
