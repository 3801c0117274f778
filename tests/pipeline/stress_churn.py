"""The nightly sync against servers that never stop changing, run many times (not collected by pytest).

    .venv/bin/python -m tests.pipeline.stress_churn --runs 10                 # every scenario
    .venv/bin/python -m tests.pipeline.stress_churn --runs 3 --only slow

Scenarios (the guarantee under continuous change, docs/spec-decisions.md#api-client):
- simulator: our service, 20,000 KOLs, its own activity simulator at 20 actions/s (about 2 KOLs created and
  0.5 archived per second); the change log is the service's outbox (kol.created, kol.archived).
- churn: our service, 100,000 KOLs, 2 KOLs created and 2 archived per second through its store (the
  benchmark's churn run); the change log is kept by the churn thread.
- slow: the spec server, 20,000 KOLs, each request 1.2 s (one walk of the active list takes over a
  minute), 2 created and 2 archived per second.

Each run syncs into a fresh data directory and checks the guarantee (tests/pipeline/churn.py) against the
change log over the listing's window. One line per run, a summary per scenario; exit 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sync.catalog import KOLS
from tests.pipeline.churn import Change, Churn, assert_guarantee
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import sync, table_rows
from tests.pipeline.test_api_client_support import add_kols, archive_kols
from tests.spec_server import SpecServer

# Outbox stamps are taken inside the transaction; its commit follows within this margin.
OUTBOX_MARGIN = timedelta(seconds=0.5)


@dataclass
class RunResult:
    scenario: str
    ok: bool
    seconds: float
    detail: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _kols(connect) -> tuple[set[str], set[str]]:
    conn = connect()
    try:
        rows = conn.execute("SELECT id, is_archived FROM kols").fetchall()
    finally:
        conn.close()
    return {i for i, a in rows if not a}, {i for i, a in rows if a}


def _outbox_log(db: Path, since: int) -> list[Change]:
    """kol.created and kol.archived from the service's outbox after row `since`, as changes."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT event, payload, created_at FROM webhook_events WHERE seq > ? AND event IN ('kol.created', 'kol.archived')",
            (since,),
        ).fetchall()
    finally:
        conn.close()
    log = []
    for event, payload, created_at in rows:
        moment = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        kol_id = json.loads(payload)["data"]["id"]
        log.append(Change(event.split(".")[1], kol_id, moment - OUTBOX_MARGIN, moment + OUTBOX_MARGIN))
    return log


class _Logged:
    """Churn's interface for a change log read afterwards (the simulator's outbox)."""

    def __init__(self, log: list[Change]):
        self.log = log


_TEMPLATES: dict[str, Any] = {}  # scenario -> a seeded, stopped service whose database each run copies


def _service_copy(scenario: str, work: Path, **sizes: int) -> Any:
    """A fresh copy of the scenario's seeded database (seeded once per process), not yet served."""
    if scenario not in _TEMPLATES:
        template = start_service(Path(tempfile.mkdtemp(prefix=f"stress-{scenario}-template-")), **sizes)
        template.server.stop()
        _TEMPLATES[scenario] = template
    template = _TEMPLATES[scenario]
    db_path = work / "service.db"
    source, target = sqlite3.connect(template.db_path), sqlite3.connect(db_path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return _Copy(db_path, template.api_key, template.org_id)


@dataclass
class _Copy:
    """A served copy of a seeded database: what sync() and the churn helpers need of a service."""

    db_path: Path
    api_key: str
    org_id: str
    base_url: str = ""
    server: Any = None

    def serve(self, **settings: Any) -> _Copy:
        from service.server import ServiceServer
        from service.settings import ServiceSettings

        self.server = ServiceServer(ServiceSettings(db=self.db_path, rate_limits_enabled=False, rate_window_seconds=1,
                                                    **settings)).start()
        self.base_url = self.server.base_url
        return self

    def connect(self) -> sqlite3.Connection:
        from service.store import db

        return db.connect(self.db_path)


def run_simulator(work: Path) -> RunResult:
    service = _service_copy("simulator", work, kols=20_000, campaigns=100, products=30, signals=2_000)
    conn = service.connect()
    since = conn.execute("SELECT coalesce(max(seq), 0) FROM webhook_events").fetchone()[0]
    conn.close()
    active, archived = _kols(service.connect)
    service.serve(simulate_per_second=20, simulate_seed=int(time.time()), webhook_worker_enabled=False)
    started = time.monotonic()
    try:
        summary = sync(service, work / "data")
    finally:
        service.server.stop()
    return _judge("simulator", started, summary, work, _Logged(_outbox_log(service.db_path, since)), active, archived)


def run_churn(work: Path) -> RunResult:
    service = _service_copy("churn", work, kols=100_000, campaigns=300, products=50, signals=10_000).serve()
    active, archived = _kols(service.connect)
    started = time.monotonic()
    try:
        with Churn(lambda n: add_kols(service, n), lambda ids: archive_kols(service, ids), sorted(active), 2.0, 2.0,
                   seed=int(time.time())) as churn:
            summary = sync(service, work / "data")
    finally:
        service.server.stop()
    return _judge("churn", started, summary, work, churn, active, archived)


def run_slow(work: Path) -> RunResult:
    with SpecServer(kols=19_000, archived_kols=1_000, campaigns=50, products=20, signals=200,
                    random_seed=int(time.time()) % 1000) as server:
        active, archived = set(server.active_kol_ids()), server.archived_kol_ids()
        server.latency = 1.2
        started = time.monotonic()
        with Churn(server.create_kols, server.archive_kols, sorted(active), 2.0, 2.0, seed=int(time.time())) as churn:
            summary = sync(server, work / "data")
    return _judge("slow", started, summary, work, churn, active, archived)


def _judge(scenario: str, started: float, summary: Any, work: Path, churn: Any, active: set[str], archived: set[str]) -> RunResult:
    seconds = time.monotonic() - started
    lake = summary.asset("lake/kols").metadata
    rows = table_rows(work / "data" / "analytics.duckdb", KOLS.table)
    try:
        counts = assert_guarantee(rows, churn, active, archived, lake)
    except AssertionError as error:
        return RunResult(scenario, False, seconds, str(error)[:400], lake)
    if summary.failed_checks:
        return RunResult(scenario, False, seconds, f"failed checks {summary.failed_checks}", lake)
    created = sum(1 for c in churn.log if c.kind == "created")
    gone = sum(1 for c in churn.log if c.kind == "archived")
    walk = datetime.fromisoformat(lake["listing_ended_at"]) - datetime.fromisoformat(lake["listing_started_at"])
    return RunResult(scenario, True, seconds,
                     f"{counts}; {created} created, {gone} archived during the run; listing {walk.total_seconds():.0f} s, "
                     f"repair passes {lake['repair_passes']}, in flux {lake['rows_in_flux']}, lookups {lake['lookups']}; "
                     f"{lake['listing']}", lake)


SCENARIOS = {"simulator": run_simulator, "churn": run_churn, "slow": run_slow}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args()
    failures = 0
    for scenario in args.only or list(SCENARIOS):
        results = []
        for run in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix=f"stress-{scenario}-") as tmp:
                try:
                    result = SCENARIOS[scenario](Path(tmp))
                except Exception as error:  # a run that raises counts as failed, with its one line
                    result = RunResult(scenario, False, 0.0, f"{type(error).__name__}: {str(error)[:300]}")
            results.append(result)
            print(f"{scenario} run {run}/{args.runs}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.0f} s: {result.detail}",
                  flush=True)
        passed = sum(r.ok for r in results)
        failures += len(results) - passed
        print(f"== {scenario}: {passed}/{len(results)} runs met the guarantee; median run "
              f"{statistics.median(r.seconds for r in results):.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
