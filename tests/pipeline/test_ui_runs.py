"""A run `commops sync` executes in its own process shows in the Dagster UI where a scheduled run does: on the
Overview timeline (which places runs by their code location and repository) and on the job's page (which
lists the job's runs of that repository), asked of a real `dagster-webserver` over GraphQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from commops_cli.daemon_process import running_process
from http_serving.sockets import free_port
from tests.waiting import wait_until

LOCATION, REPOSITORY = "pipelines.definitions", "__repository__"

JOB_RUNS = """
query ($job: String!) {
  pipelineOrError(params: {repositoryLocationName: "%s", repositoryName: "%s", pipelineName: $job}) {
    __typename
    ... on Pipeline { runs { runId } }
  }
}""" % (LOCATION, REPOSITORY)

TIMELINE_RUNS = """
query {
  runsOrError { ... on Runs { results { runId pipelineName repositoryOrigin { repositoryLocationName repositoryName } } } }
}"""


def test_a_commops_sync_run_shows_on_the_overview_timeline_and_the_page_of_nightly_sync(make_service, tmp_path):
    service = make_service(kols=10, campaigns=1, products=1, signals=2)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env.update(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key, COMMOPS_DATA_DIR=str(data_dir))
    synced = subprocess.run([sys.executable, "-m", "commops_cli", "sync", "--no-progress"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=180)
    assert synced.returncode == 0, synced.stderr

    port = free_port()
    webserver = [str(Path(sys.executable).with_name("dagster-webserver")), "-m", LOCATION, "-h", "127.0.0.1",
                 "-p", str(port)]
    log = tmp_path / "webserver.log"
    with running_process(webserver, {**env, "DAGSTER_HOME": str(data_dir / "dagster_home")}, log, cwd=tmp_path) as web:
        graphql = f"http://127.0.0.1:{port}/graphql"

        def job_runs() -> tuple[list[str]] | None:
            """(the run ids the job's page lists,) once the webserver has loaded the code location."""
            assert web.poll() is None, log.read_text()[-2000:]
            try:
                answer = httpx.post(graphql, json={"query": JOB_RUNS, "variables": {"job": "nightly_sync"}}, timeout=10)
            except httpx.HTTPError:
                return None
            job = answer.json()["data"]["pipelineOrError"]
            return ([run["runId"] for run in job["runs"]],) if job["__typename"] == "Pipeline" else None

        (runs,) = wait_until(job_runs, 120, 0.5, what="the webserver to load pipelines.definitions")
        timeline = httpx.post(graphql, json={"query": TIMELINE_RUNS}, timeout=10).json()["data"]["runsOrError"]["results"]

    (run,) = timeline
    assert runs == [run["runId"]]
    assert run["pipelineName"] == "nightly_sync"
    assert run["repositoryOrigin"] == {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
