"""The Dagster UI: runs the commands execute in their own process (`commops sync`, `reconcile`, `events
apply`) show where scheduled runs do, on the Overview timeline (which places runs by their code location
and repository) and on their job's page (which lists the job's runs of that repository), asked of a real
`dagster-webserver` over GraphQL. (`commops ui` starting without Dagster's warnings: test_stopping.py.)"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import httpx

from commops_cli.daemon_process import running_process
from http_serving.sockets import free_port
from tests.waiting import wait_until
from resources.inbox import open_inbox
from resources.inbox.envelope import parse_envelope

REPO = Path(__file__).resolve().parents[2]
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

EXPORT_COLUMNS = ["Id", "FirstName", "LastName", "Email", "Title", "Phone", "Department", "Account.Name",
                  "MailingCity", "MailingState", "MailingCountry", "LastModifiedDate"]


def test_runs_of_sync_reconcile_and_events_apply_show_on_the_overview_timeline_and_their_jobs_pages(
    make_service, tmp_path
):
    service = make_service(kols=10, campaigns=1, products=1, signals=2)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME", "SALESFORCE_"))}
    env.update(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key, COMMOPS_DATA_DIR=str(data_dir),
               COMMOPS_CRM_CSV=str(_crm_export(tmp_path)), PYTHONPATH=str(REPO))
    _commops(["sync", "--no-progress", "--no-marts"], env, tmp_path)  # the marts add nothing to what runs show
    _commops(["reconcile"], env, tmp_path)
    _store_an_update_of_a_synced_kol(data_dir)
    _commops(["events", "apply"], env, tmp_path)

    port = free_port()
    webserver = [str(Path(sys.executable).with_name("dagster-webserver")), "-m", LOCATION, "-h", "127.0.0.1",
                 "-p", str(port)]
    log = tmp_path / "webserver.log"
    with running_process(webserver, {**env, "DAGSTER_HOME": str(data_dir / "dagster_home")}, log, cwd=tmp_path) as web:
        graphql = f"http://127.0.0.1:{port}/graphql"

        def job_runs(job: str) -> tuple[list[str]] | None:
            """(the run ids the job's page lists,) once the webserver has loaded the code location."""
            assert web.poll() is None, log.read_text()[-2000:]
            try:
                answer = httpx.post(graphql, json={"query": JOB_RUNS, "variables": {"job": job}}, timeout=10)
            except httpx.HTTPError:
                return None
            found = answer.json()["data"]["pipelineOrError"]
            return ([run["runId"] for run in found["runs"]],) if found["__typename"] == "Pipeline" else None

        wait_until(lambda: job_runs("nightly_sync"), 120, 0.5, what="the webserver to load pipelines.definitions")
        pages = {job: job_runs(job)[0] for job in ("nightly_sync", "crm_reconciliation", "apply_webhook_events")}
        timeline = httpx.post(graphql, json={"query": TIMELINE_RUNS}, timeout=10).json()["data"]["runsOrError"]["results"]

    assert sorted(run["pipelineName"] for run in timeline) == ["apply_webhook_events", "crm_reconciliation",
                                                                 "nightly_sync"]
    for run in timeline:
        assert run["repositoryOrigin"] == {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}, run
        assert pages[run["pipelineName"]] == [run["runId"]]


def _commops(args: list[str], env: dict[str, str], cwd: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "commops_cli", *args], env=env, cwd=cwd, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, f"commops {' '.join(args)}: {result.stderr}"


def _crm_export(tmp_path: Path) -> Path:
    """A CRM contacts export (COMMOPS_CRM_CSV) of one contact."""
    export = tmp_path / "contacts.csv"
    with export.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(EXPORT_COLUMNS)
        writer.writerow(["003000000000001AAA", "Ada", "Lovelace", "ada@example.org", "", "", "", "", "", "", "", ""])
    return export


def _store_an_update_of_a_synced_kol(data_dir: Path) -> None:
    """A kol.updated delivery in the inbox, as the receiver stores it, for `commops events apply` to apply."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as warehouse:
        (kol_id,) = warehouse.execute("SELECT id FROM kols LIMIT 1").fetchone()
    raw = json.dumps({"id": "wh_evt_ui_runs", "event": "kol.updated", "created_at": datetime.now(UTC).isoformat(),
                      "data": {"id": kol_id}}).encode()
    with open_inbox(data_dir) as inbox:
        assert inbox.add(raw, parse_envelope(raw))
