"""Every benchmark in one run, our sync side by side with dlt and PyAirbyte, and the page that shows them.

    .venv/bin/pip install -q -e '.[dev,bench]'                # dlt and matplotlib: the `bench` extra
                                                               # (PyAirbyte: its own venv, made on first use)
    .venv/bin/python -m benchmarks --quick                     # smoke run: 10,000 KOLs, 2 runs (development)
    .venv/bin/python -m benchmarks --kols 100000 --runs 5 --sizes 10000,100000,1000000 --size-timeout 1800 \
        --seed-cache ~/.cache/commops-bench/seeds                # full run (seeding 1M once: ~5 min)
    .venv/bin/python -m benchmarks --quick --only compare,hostile   # selected benchmarks only
    .venv/bin/python -m benchmarks --merge --only hostile ...   # measure one part again, keep the others' figures
    .venv/bin/python -m benchmarks --render                     # the page and chart again from docs/benchmarks.json

Seeds the local service at --kols KOLs (campaigns, products, signals and events scaled as in
nightly_sync.py: 5% / 0.5% / 100% / 2% of the KOLs), serves it in a child process that counts every
request it receives (benchmarks/counting.py), then runs the benchmarks chosen with --only:

  compare     our full sync (`run_sync`, KOL details off), the peers at their best: dlt's
              rest_api pipeline (benchmarks/peer_dlt.py: parallelized resources, workers for 2 cores,
              the last page known from the first) once per loader file format of --dlt-format (default
              parquet, which dlt's DuckDB page suggests), and PyAirbyte's declarative source
              (benchmarks/peer_airbyte.py and .yaml, in its own venv, made on first use under
              ~/.cache/commops-bench/; --no-airbyte leaves it out), and the bare concurrent fetch loop
              of nightly_sync.py (the floor), alternating, --runs times each, each in its own child
              process: wall time, peak RSS, HTTP requests (server side), rows landed per table
              (unequal rows: the pair is VOID)
  hostile     ours and the peers (dlt: --hostile-dlt-format, default parquet) against injected faults (500/503,
              dropped connections, truncated bodies) and against KOLs created and archived while
              paging; landed rows vs the service's truth
  ratelimit   the same tools under the starter plan's limit in a short window (--rate-window, default
              2 s): wall time vs the floor (pages / limit per window x window), 429s met, finished or not
  sizes       sync wall time against dataset size, every tool, one run per size (--sizes), each killed
              after --size-timeout s; chart
  ours        our own scripts: service_paging.py, receiver_throughput.py, incremental_sync.py,
              webhook_latency.py (starts dagster-daemon; skip it with --only), reconciliation.py,
              crm_matching.py (which also rewrites docs/benchmarks-crm-matching.json, rendered as a
              section of its own) (run when present, else "not run"); name single scripts in --only
              to run just those,
              e.g. --only compare,service_paging leaves webhook_latency "not run"

Prints a table per benchmark and writes docs/benchmarks.md (machine, versions, date, command lines,
the aims checked), docs/benchmarks.json (every raw figure, saved after each benchmark, so a failure
loses only its own) and docs/benchmarks-sync-time.png. Needs the `bench` extra (dlt, matplotlib).
The page is rendered whole from those figures, with the hand-written notes of docs/benchmarks-notes.md (each
under its `## heading`, placed at the end of that section): edit the notes, never the page.
Two cores are enough, but do not run it beside other measurements: it uses both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import peer_airbyte  # noqa: E402
from benchmarks.counting import COUNTS_PATH, SERVE  # noqa: E402
from benchmarks.nightly_sync import BARE, CONCURRENCY, SYNC, _catalog_walks, host_probe, seed_service  # noqa: E402

BENCHMARKS = ("compare", "hostile", "ratelimit", "sizes", "ours")
OURS = ("service_paging", "receiver_throughput", "incremental_sync", "webhook_latency", "reconciliation", "crm_matching")
TABLES = ("kols", "campaigns", "products", "signals")
DOCS = ROOT / "docs"
FAULTS = {"fault_seed": 12, "fault_500_rate": 0.01, "fault_503_rate": 0.01, "fault_drop_rate": 0.01,
          "fault_truncate_rate": 0.01}
CHURN_PER_SECOND = 2.0  # default of --churn: KOLs created and (as many) archived per second while a tool pages
CHILD_TIMEOUT = 3600
# A child (a tool's run) is killed above this resident memory: 60% of the machine's RAM
MAX_CHILD_RSS_MB = 0.6 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20


# ---- the service, children, landed rows ------------------------------------------------------------

class Service:
    """The service on `db` in a child process (settings as ServiceSettings fields), counting requests."""

    def __init__(self, db: Path, **settings):
        self.process = subprocess.Popen([sys.executable, "-c", SERVE, str(db), json.dumps(settings)], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url:
            raise SystemExit("the service did not start")
        self.root = self.base_url.removesuffix("/v1")

    def counts(self, reset: bool = True) -> dict:
        return httpx.get(self.root + COUNTS_PATH, params={"reset": 1} if reset else {}, timeout=30).json()

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


@contextmanager
def service(db: Path, **settings):
    served = Service(db, **settings)
    try:
        yield served
    finally:
        served.stop()


def child(argv: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """Run a child to its end: its exit status, own wall time, last stdout line as JSON when it is one.
    A child whose resident memory (with its own children) passes MAX_CHILD_RSS_MB, or that runs longer
    than `timeout` seconds (default CHILD_TIMEOUT), is killed and marked so: a tool that grows without
    bound must not take a shared machine down with it."""
    timeout = timeout or CHILD_TIMEOUT
    environment = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    environment.update({"RUNTIME__DLTHUB_TELEMETRY": "false", "RUNTIME__LOG_LEVEL": "WARNING", **(env or {})})
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(argv, cwd=ROOT, env=environment, stdout=out, stderr=err, text=True)
        code, peak = None, 0.0
        while code is None:
            try:
                code = process.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                peak = max(peak, _tree_rss_mb(process.pid))
                if peak > MAX_CHILD_RSS_MB or time.perf_counter() - started > timeout:
                    why = (f"killed: resident memory over {MAX_CHILD_RSS_MB:,.0f} MB" if peak > MAX_CHILD_RSS_MB
                           else f"killed: over {timeout:.0f} s")
                    for pid in _tree(process.pid)[::-1]:
                        try:
                            os.kill(pid, 9)
                        except ProcessLookupError:
                            pass
                    process.wait()
                    code = why
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = {"exit": code, "process_seconds": time.perf_counter() - started, "sampled_rss_mb": peak}
    lines = stdout.strip().splitlines()
    try:
        result.update(json.loads(lines[-1]))
    except (IndexError, ValueError):
        pass
    if code != 0:
        result["error"] = code if isinstance(code, str) else _last_error(stderr)
    result["stdout"] = stdout
    result.setdefault("seconds_note", "in-child run time" if "seconds" in result else "no figure from the child: process time")
    if "seconds" not in result:
        result["seconds"] = result["process_seconds"]
    return result


def _tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc), parents first."""
    pids, index = [pid], 0
    while index < len(pids):
        try:
            text = Path(f"/proc/{pids[index]}/task/{pids[index]}/children").read_text()
        except OSError:
            text = ""
        pids += [int(p) for p in text.split()]
        index += 1
    return pids


def _tree_rss_mb(pid: int) -> float:
    total = 0
    for member in _tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line or "failed" in line]
    return (errors or lines or ["(no output)"])[-1].strip()[:300]


def run_ours(served: Service, key: str, data_dir: Path, timeout: float | None = None) -> dict:
    result = child([sys.executable, "-c", SYNC, served.base_url, key, str(data_dir), "0", str(CONCURRENCY)],
                   timeout=timeout)
    result.pop("stdout", None)
    result["server"] = served.counts()
    result["landed"] = landed(data_dir / "warehouse.duckdb", "main")
    return result


FORMAT_LABELS = {
    "default": "insert_values, dlt's default for DuckDB",
    "insert_values": "insert_values",
    "parquet": "parquet, as dlt's DuckDB page suggests",
    "jsonl": "jsonl",
}
AIRBYTE_PEER = "airbyte"


def peer_name(file_format: str) -> str:
    """The tool name of dlt with a loader file format: `dlt` (its default) or `dlt-parquet`, ..."""
    return "dlt" if file_format == "default" else f"dlt-{file_format}"


def dlt_arm(name: str) -> tuple[str, bool]:
    """A dlt peer's loader file format and whether it is tuned: `dlt-parquet` (tuned), `dlt-parquet-plain`, `dlt`."""
    base = name.removesuffix("-plain")
    return ("default" if base == "dlt" else base.removeprefix("dlt-")), base == name


def peer_label(name: str) -> str:
    if name == AIRBYTE_PEER:
        return f"PyAirbyte declarative source ({peer_airbyte.AIRBYTE.replace('==', ' ')}, DuckDB cache)"
    file_format, tuned = dlt_arm(name)
    return f"dlt rest_api ({FORMAT_LABELS.get(file_format, file_format)}{'' if tuned else '; untuned'})"


def peer_setup(peers: list[str]) -> dict[str, str]:
    """How each peer was configured, recorded with its figures (the page describes the run it shows)."""
    from benchmarks.peer_dlt import WORKERS

    dlt = ("rest_api source, merge on id, into DuckDB, parallelized=True on every resource, "
           + ", ".join(f"{k}={v}" for k, v in WORKERS.items())
           + ", the last page known from the first (total_path meta.total_pages on the KOL list, meta.total / "
           "meta.per_page on the others), loader_file_format={}")
    setups = {}
    for name in peers:
        if name == AIRBYTE_PEER:
            setups[name] = (f"benchmarks/peer_airbyte.py: {peer_airbyte.AIRBYTE} in its own venv, AIRBYTE_OFFLINE_MODE=1, "
                            "the low-code manifest benchmarks/peer_airbyte.yaml (page numbers up to the last page the "
                            f"first page's meta gives, bearer auth, concurrency_level {CONCURRENCY}), into PyAirbyte's "
                            "DuckDB cache (merge on id)")
        elif dlt_arm(name)[1]:
            setups[name] = "benchmarks/peer_dlt.py: " + dlt.format(f"`{dlt_arm(name)[0]}`")
        else:
            setups[name] = (f"benchmarks/peer_dlt.py with `plain`: the same (loader_file_format=`{dlt_arm(name)[0]}`) "
                            "without parallelized and the worker settings (dlt's defaults), to show whether the "
                            "tuning pays on this machine")
    return setups


def run_dlt(served: Service, key: str, directory: Path, file_format: str = "default",
            timeout: float | None = None, tuned: bool = True) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / "dlt.duckdb"
    result = child([sys.executable, "-m", "benchmarks.peer_dlt", served.base_url, key, str(database),
                    str(directory / "pipelines"), file_format, *([] if tuned else ["plain"])], timeout=timeout)
    result.pop("stdout", None)
    result["server"] = served.counts()
    result["landed"] = landed(database, "commops")
    return result


def run_airbyte(served: Service, key: str, directory: Path, timeout: float | None = None) -> dict:
    """PyAirbyte from its own venv (made by main before any measurement), into a DuckDB cache of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / "airbyte.duckdb"
    python = peer_airbyte.venv_dir() / "bin" / "python"
    result = child([str(python), "-m", "benchmarks.peer_airbyte", served.base_url, key, str(database),
                    str(CONCURRENCY)], timeout=timeout)
    result.pop("stdout", None)
    result["server"] = served.counts()
    result["landed"] = landed(database, "main")
    return result


def tools(peers: list[str]) -> list[tuple[str, object]]:
    """(name, runner) for our sync and each peer: dlt with a loader file format (`dlt-parquet`), or PyAirbyte."""
    runners = [("ours", run_ours)]
    for name in peers:
        if name == AIRBYTE_PEER:
            runners.append((name, run_airbyte))
            continue
        file_format, tuned = dlt_arm(name)
        runners.append((name, lambda served, key, directory, timeout=None, f=file_format, tuned=tuned:
                        run_dlt(served, key, directory, f, timeout, tuned)))
    return runners


def run_bare(served: Service, key: str, walks: str, timeout: float | None = None) -> dict:
    result = child([sys.executable, "-c", BARE, served.base_url, key, str(CONCURRENCY), walks], timeout=timeout)
    result.pop("stdout", None)
    result["server"] = served.counts()
    return result


def landed(database: Path, schema: str) -> dict:
    """Per table: rows, distinct ids, and {id: (updated_at as UTC ISO, is_archived)} for the truth check."""
    import duckdb

    if not database.exists():
        return {}
    tables = {}
    with duckdb.connect(str(database), read_only=True) as conn:
        present = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [schema]).fetchall()}
        for table in TABLES:
            if table not in present:
                continue
            columns = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?",
                [schema, table]).fetchall()}
            archived = "is_archived" if "is_archived" in columns else "NULL"
            updated = "updated_at" if "updated_at" in columns else "NULL"
            rows = conn.execute(f'SELECT id, {updated}, {archived} FROM "{schema}"."{table}"').fetchall()
            tables[table] = {"rows": len(rows), "ids": len({r[0] for r in rows}),
                             "_state": {r[0]: (_iso(r[1]), r[2]) for r in rows}}
    return tables


def _iso(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds")


def truth(db: Path) -> dict:
    """The service's rows now: {table: {id: (updated_at, is_archived)}}."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        state = {}
        for table in TABLES:
            archived = "is_archived" if table == "kols" else "NULL"
            state[table] = {r[0]: (_iso(r[1]), None if r[2] is None else bool(r[2]))
                            for r in conn.execute(f"SELECT id, updated_at, {archived} FROM {table}")}
        return state
    finally:
        conn.close()


def against_truth(result: dict, true: dict) -> dict:
    """Rows missing (in the service, not landed), extra (landed, not in the service), doubled (an id
    landed twice) and stale (landed with another updated_at or archived flag than the service's now)."""
    report = {}
    for table in TABLES:
        got = result.get("landed", {}).get(table)
        want = true[table]
        if got is None:
            report[table] = {"missing": len(want), "extra": 0, "doubled": 0, "stale": 0, "note": "no table"}
            continue
        state = got["_state"]
        stale = 0
        for kol_id, (updated, archived) in state.items():
            if kol_id in want:
                true_updated, true_archived = want[kol_id]
                if (updated and true_updated and updated != true_updated) or (
                        archived is not None and true_archived is not None and bool(archived) != true_archived):
                    stale += 1
        report[table] = {"missing": len(set(want) - set(state)), "extra": len(set(state) - set(want)),
                         "doubled": got["rows"] - got["ids"], "stale": stale}
    return report


def rows_of(result: dict) -> dict:
    return {t: result.get("landed", {}).get(t, {}).get("rows") for t in TABLES}


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def strip_state(value):
    if isinstance(value, dict):
        return {k: strip_state(v) for k, v in value.items() if k != "_state"}
    if isinstance(value, list):
        return [strip_state(v) for v in value]
    return value


# ---- benchmarks ------------------------------------------------------------------------------------

def bench_compare(db: Path, key: str, runs: int, work: Path, peers: list[str]) -> dict:
    walks = _catalog_walks()
    pairs = []
    with service(db, rate_limits_enabled=False) as served:
        run_bare(served, key, walks)  # warm-up: the service's caches, not measured
        for run in range(runs):
            measured = {"bare": run_bare(served, key, walks)}
            for name, runner in tools(peers):
                measured[name] = runner(served, key, work / f"{name}-{run}")
            measured["bare"].pop("landed", None)
            ours = measured["ours"]
            # A killed run landed nothing to compare: it counts as not finished, not as VOID.
            measured["void_tables"] = {peer: [t for t in TABLES if rows_of(ours)[t] != rows_of(measured[peer])[t]]
                                       for peer in peers if measured[peer]["exit"] == 0}
            pairs.append(measured)
            print(f"  run {run + 1}: " + " | ".join(_run_line(name, measured[name]) for name in ("bare", "ours", *peers))
                  + "".join(f" | VOID {peer}: rows differ in {', '.join(t)}"
                            for peer, t in measured["void_tables"].items() if t), flush=True)
    summary = {}
    for name in ("bare", "ours", *peers):
        summary[name] = {
            "seconds": median(p[name].get("seconds") for p in pairs if p[name]["exit"] == 0),  # finished runs
            "peak_rss_mb": median(p[name].get("peak_rss_mb") for p in pairs if p[name]["exit"] == 0),
            "requests": median(p[name]["server"]["counts"].get("requests") for p in pairs),
            "finished": sum(p[name]["exit"] == 0 for p in pairs),
            "exits": [p[name]["exit"] for p in pairs],
            "errors": [p[name]["error"] for p in pairs if p[name].get("error")],
        }
        if name != "bare":
            summary[name]["rows"] = rows_of(pairs[-1][name])
    summary["ratios"] = {"ours_over_bare_seconds": [_ratio(p["ours"].get("seconds"), p["bare"].get("seconds"))
                                                     for p in pairs]}
    for peer in peers:
        finished = [p for p in pairs if p[peer]["exit"] == 0]
        summary["ratios"][f"{peer}_over_ours_seconds"] = [_ratio(p[peer].get("seconds"), p["ours"].get("seconds"))
                                                          for p in finished]
        summary["ratios"][f"{peer}_over_ours_rss"] = [_ratio(p[peer].get("peak_rss_mb"), p["ours"].get("peak_rss_mb"))
                                                      for p in finished]
        summary["ratios"][f"{peer}_over_ours_requests"] = [
            _ratio(p[peer]["server"]["counts"].get("requests"), p["ours"]["server"]["counts"].get("requests"))
            for p in finished]
    summary["void"] = {peer: sorted({t for p in pairs for t in p["void_tables"].get(peer, [])}) for peer in peers}
    return {"runs": pairs, "peers": peers, "summary": summary}


def _run_line(name: str, result: dict) -> str:
    requests = result["server"]["counts"].get("requests")
    line = f"{name} {result.get('seconds', 0):.1f}s {result.get('peak_rss_mb', 0):.0f} MB {requests} req"
    return line + ("" if result["exit"] == 0 else f" exit {result['exit']}")


def _ratio(a, b):
    return a / b if a is not None and b else None


class Churn:
    """Creates and archives KOLs at a fixed rate through the service's store (the activity
    simulator's own actions, so the outbox sees them as from the API), in a thread of this process."""

    runs = 0

    def __init__(self, db: Path, per_second: float):
        from service.simulator import Simulator
        from service.store import db as store_db

        Churn.runs += 1  # another seed per run: the same seed would generate the same (taken) emails again
        self.sim = Simulator(db, per_second=per_second, random_seed=5 + Churn.runs)
        self.transaction = store_db.transaction
        self.per_second = per_second
        self.created = self.archived = self.skipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        from service.simulator import _NOT_APPLICABLE

        conn = self.sim._connection()
        org_id = conn.execute("SELECT id FROM organizations ORDER BY id LIMIT 1").fetchone()[0]
        interval = 1 / self.per_second
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += interval  # a fixed schedule: the time a change takes is not added to the interval
            for action, counter in ((self.sim._create_kol, "created"), (self.sim._archive_kol, "archived")):
                try:
                    with self.transaction(conn):
                        done = action(conn, org_id)
                except _NOT_APPLICABLE:  # e.g. a generated email already taken: skipped, as the simulator does
                    self.skipped += 1
                    continue
                setattr(self, counter, getattr(self, counter) + bool(done))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self.sim.stop()


def _in_flux(result: dict) -> str:
    """The rows a tool reported as in flux over its lists (ours: `rows_in_flux`); "–" where it cannot tell."""
    counts = [a.get("in_flux") for a in (result.get("assets") or {}).values()]
    return "–" if not any(c is not None for c in counts) else str(sum(c or 0 for c in counts))


def bench_hostile(db: Path, key: str, work: Path, churn_rate: float, peers: list[str]) -> dict:
    scenarios = {}
    for scenario, settings, churn in (("faults", {"rate_limits_enabled": False, **FAULTS}, False),
                                      ("churn", {"rate_limits_enabled": False}, True)):
        copy = work / f"{scenario}.db"
        shutil.copy(db, copy)
        results = {}
        with service(copy, **settings) as served:
            for tool, run in tools(peers):
                if churn:
                    with Churn(copy, churn_rate) as changes:
                        result = run(served, key, work / f"{scenario}-{tool}")
                    result["churn"] = {"created": changes.created, "archived": changes.archived,
                                       "skipped": changes.skipped}
                else:
                    result = run(served, key, work / f"{scenario}-{tool}")
                result["truth"] = against_truth(result, truth(copy))
                results[tool] = result
                print(f"  {scenario} {tool}: exit {result['exit']} {result.get('error', '')[:120]} "
                      f"requests {result['server']['counts']} vs truth {result['truth']}", flush=True)
        scenarios[scenario] = {"settings": settings, "churn_per_second": churn_rate if churn else 0,
                               "tools": list(results), **results}
    return scenarios


def bench_ratelimit(db: Path, key: str, work: Path, window: float, plan: str, pages: int | None,
                    peers: list[str]) -> dict:
    from commops_spec.constants import PLANS

    copy = work / "ratelimit.db"
    shutil.copy(db, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE organizations SET plan = ?", (plan,))
    limit = PLANS[plan]["per_minute"]
    results = {}
    # the day window is as short as the minute's: only the per-minute limit is measured
    with service(copy, rate_limits_enabled=True, rate_window_seconds=window, day_window_seconds=window) as served:
        time.sleep(window)  # let the seeding's window pass
        served.counts()
        for tool, run in tools(peers):
            time.sleep(window)  # a fresh window for each tool
            served.counts()
            result = run(served, key, work / f"ratelimit-{tool}")
            windows = sorted(set(result["server"]["windows_ok"]) | set(result["server"]["windows_429"]), key=float)
            rejected = result["server"]["windows_429"]
            result["first_window_429s"] = rejected.get(windows[0], 0) if windows else 0
            result["later_429s"] = sum(rejected.get(w, 0) for w in windows[1:])
            result["pages"] = result["server"]["counts"].get("200", 0)
            full = windows[1:-1]  # the first window began before the run, the last one ran out of work
            result["full_windows"] = len(full)
            result["window_use"] = median(result["server"]["windows_ok"].get(w, 0) / limit for w in full)
            results[tool] = result
            print(f"  {tool}: exit {result['exit']} {result.get('seconds', 0):.1f}s, "
                  f"{result['server']['counts']}, 429s first window {result['first_window_429s']}, "
                  f"after {result['later_429s']}", flush=True)
    needed = pages or results["ours"]["pages"]
    floor = needed / limit * window
    for result in results.values():
        result["floor_seconds"] = floor
        result["over_floor"] = _ratio(result.get("seconds"), floor)
    return {"plan": plan, "limit_per_window": limit, "window_seconds": window, "pages": needed,
            "floor_seconds": floor, "tools": list(results), **results}


def bench_sizes(sizes: list[int], main: dict | None, main_kols: int, work: Path, peers: list[str],
                timeout: float, seed_cache: Path | None = None) -> list[dict]:
    """One run per size and tool; a tool that does not finish within `timeout` s is killed and shown so."""
    points = []
    for size in sizes:
        if main and size == main_kols:
            s = main["summary"]
            names = ("bare", "ours", *main["peers"])
            points.append({"kols": size, "runs": len(main["runs"]), **{name: s[name]["seconds"] for name in names},
                           "exits": {name: _first_failure(s[name]["exits"]) for name in names},
                           "errors": {name: s[name]["errors"][0] for name in names if s[name].get("errors")
                                      and _first_failure(s[name]["exits"]) != 0}})
            continue
        directory = work / f"size-{size}"
        directory.mkdir()
        db, key = seed_service(directory, size / 100_000, seed_cache)
        with service(db, rate_limits_enabled=False) as served:
            measured = {"bare": run_bare(served, key, _catalog_walks(), timeout)}
            for name, runner in tools(peers):
                measured[name] = runner(served, key, directory / name, timeout)
                measured[name].pop("landed", None)
        done = lambda r: r.get("seconds") if r["exit"] == 0 else None  # noqa: E731
        points.append({"kols": size, "runs": 1, **{name: done(r) for name, r in measured.items()},
                       "exits": {name: r["exit"] for name, r in measured.items()},
                       "errors": {name: r["error"] for name, r in measured.items() if r.get("error")}})
        shutil.rmtree(directory, ignore_errors=True)
        print(f"  {size} KOLs: " + ", ".join(_run_line(name, r) for name, r in measured.items()), flush=True)
    return sorted(points, key=lambda p: p["kols"])


def _first_failure(exits: list) -> int | str:
    """A size point's exit from several runs: 0 when any finished (its median is shown), else the first failure."""
    return 0 if 0 in exits or not exits else exits[0]


def bench_ours(args, work: Path) -> dict:
    python = sys.executable
    quick = args.quick
    scripts = {
        "service_paging": [python, "benchmarks/service_paging.py", "--kols", str(args.kols), "--runs",
                           str(args.runs), "--search-rounds", "3" if quick else "7"],
        "receiver_throughput": [python, "benchmarks/receiver_throughput.py", "--runs", str(args.runs),
                                *(["--events", "1000"] if quick else [])],
        "incremental_sync": [python, "benchmarks/incremental_sync.py", "--kols", str(args.kols)],
        "webhook_latency": [python, "benchmarks/webhook_latency.py",
                            *(["--changes", "5", "--interval", "2"] if quick else [])],
        "reconciliation": [python, "benchmarks/reconciliation.py"],
        "crm_matching": [python, "benchmarks/crm_matching.py", "all", "--write"],
    }
    results = {}
    for name, argv in scripts.items():
        if name in args.skip:
            results[name] = {"status": "not run", "why": "left out with --only / --skip"}
            continue
        if not (ROOT / argv[1]).exists():
            results[name] = {"status": "not run", "why": f"{argv[1]} is not in this branch"}
            continue
        print(f"  {' '.join(argv[1:])} ...", flush=True)
        out = child(argv)
        lines = out.pop("stdout").strip().splitlines()
        results[name] = {"status": "ran" if out["exit"] == 0 else f"failed (exit {out['exit']})",
                         "command": " ".join(argv[1:]), "seconds": round(out["process_seconds"], 1),
                         "output": lines[-12:], **({"error": out["error"]} if "error" in out else {})}
        figures = {k: v for k, v in out.items() if k not in ("exit", "process_seconds", "error")}
        if figures:
            results[name]["figures"] = figures
        print("    " + "\n    ".join(lines[-6:]), flush=True)
    return results


# ---- the page ------------------------------------------------------------------------------------

def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = {"python": platform.python_version()}
    for package in ("dagster", "duckdb", "dlt", "httpx", "matplotlib"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:
            versions[package] = "not installed"
    return {"cores": os.cpu_count(), "ram_gib": round(ram, 1), "cpu": cpu, "os": platform.platform(),
            "versions": versions}


def host_speed(probes: dict | None) -> list[str]:
    """The host's speed after each benchmark: a shared host slows down by up to 2.5x for hours, whatever runs."""
    if not probes:
        return []
    return ["Host speed: nightly_sync.py's fixed Python loop took "
            + ", ".join(f"{seconds:.2f} s after {section}" for section, seconds in probes.items())
            + " (0.21 s when this host is idle and fast; slower hosts stretch every time here, not the ratios)."]


FLOOR_AIM = 1.15  # our sync's wall time over the bare fetch loop's


def aims(results: dict) -> list[tuple[str, str, str]]:
    """(aim, pass/miss/VOID/not finished, the figures), the peer aims once per peer (each dlt format, PyAirbyte)."""
    out = []
    compare = results.get("compare")
    at = results["kols"]
    if compare:
        s = compare["summary"]
        scale_note = "" if at >= 100_000 else f" (measured at {at:,} KOLs; the aim is at 100k)"
        for peer in compare["peers"]:
            void = bool(s["void"][peer])
            against = peer_label(peer)
            if not s[peer]["finished"]:
                why = "; ".join(sorted({str(e) for e in s[peer]["exits"]}))
                out.append((f"full sync >= 10x faster and <= 1/20 the peak RSS of {against} at 100k KOLs",
                            "not comparable", f"{peer} finished no run ({why})"))
                continue
            speed = _ratio(s[peer]["seconds"], s["ours"]["seconds"])
            rss = _ratio(s["ours"]["peak_rss_mb"], s[peer]["peak_rss_mb"])
            out.append((f"full sync >= 10x faster than {against} at 100k KOLs", _verdict(bool(speed and speed >= 10), void),
                        f"{peer} / ours wall time {speed:.1f}x{scale_note}" if speed else "no figure"))
            out.append((f"peak RSS <= 1/20 of {against} at 100k KOLs", _verdict(bool(rss and rss <= 1 / 20), void),
                        f"ours / {peer} peak RSS {rss:.3f} (1/{1 / rss:.1f}){scale_note}" if rss else "no figure"))
        bare = _ratio(s["ours"]["seconds"], s["bare"]["seconds"])
        out.append((f"full sync within {FLOOR_AIM}x of the bare fetch loop", "pass" if bare and bare <= FLOOR_AIM else "miss",
                    f"ours / bare {bare:.2f}{scale_note}" if bare else "no figure"))
    for point in results.get("sizes") or ():  # the sizes beyond the comparison's (1M as well)
        bare = _ratio(point.get("ours"), point.get("bare"))
        if point["kols"] > at and bare:
            medians = f"; medians of 3: nightly_sync.py --scale {point['kols'] / 100_000:g}" if point["runs"] == 1 else ""
            out.append((f"full sync within {FLOOR_AIM}x of the bare fetch loop at {point['kols']:,} KOLs",
                        "pass" if bare <= FLOOR_AIM else "miss",
                        f"ours / bare {bare:.2f} ({point['runs']} run{medians})"))
    rate = results.get("ratelimit")
    if rate and "ours" in rate:
        ours = rate["ours"]
        over = ours.get("over_floor")
        out.append(("under a rate limit within 5% of the floor", "pass" if over and over <= 1.05 else "miss",
                    (f"{ours.get('seconds', 0):.1f} s vs floor {rate['floor_seconds']:.1f} s = {over:.3f}; "
                     f"median share of the limit used per full window {fmt(ours.get('window_use'), '', 3)} "
                     f"over {ours.get('full_windows')} windows") if over else "no figure"))
        out.append(("no 429 after the first window", "pass" if ours["later_429s"] == 0 else "miss",
                    f"429s after the first window {ours['later_429s']}, in it {ours['first_window_429s']}"))
    return out


def _listed(value) -> list[str]:
    """A format list as recorded (older pages recorded one string)."""
    return [value] if isinstance(value, str) else list(value)


def _verdict(ok: bool, void: bool) -> str:
    return "VOID" if void else ("pass" if ok else "miss")


def fmt(value, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value:,}{unit}"


def write_page(results: dict, chart: str | None) -> str:
    m = results["machine"]
    v = m["versions"]
    lines = ["# Benchmarks: our sync beside dlt and PyAirbyte", ""]
    if results["quick"]:
        lines += ["> **Quick smoke run** (`--quick`: 10,000 KOLs, 2 runs): it proves the harness end to end; "
                  "its figures are not the ones the aims are about. The full run replaces this page.", ""]
    commands = results.get("commands") or [results["command"]]
    dates = results.get("command_dates") or [None] * (len(commands) - 1) + [results["date"]]
    lines += [
        "Measured with " + " then ".join(
            f"`{c}` (" + ", ".join(part for part in (date, seconds and f"{seconds / 60:.0f} min") if part) + ")"
            for c, date, seconds in zip(commands, dates, [*results.get("command_seconds", []), *[None] * len(commands)])),
        "",
        "What the figures mean, and why each missed aim is missed: [benchmarks-findings.md](benchmarks-findings.md).",
        "",
        f"Machine: {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['cpu']}; {m['os']}. "
        f"Python {v['python']}, dagster {v['dagster']}, duckdb {v['duckdb']}, dlt {v['dlt']}, httpx {v['httpx']}"
        + (f"; {results['airbyte']['package']} in its own venv (it pins another DuckDB)."
           if results.get("airbyte", {}).get("ready") else "."),
        *host_speed(results.get("host_probes")),
        f"Dataset: {results['kols']:,} KOLs; campaigns, products, signals and events scaled as in "
        "`benchmarks/nightly_sync.py` (5%, 0.5%, 100%, 2% of the KOLs); some KOLs archived by the seed.",
        "",
        "How it is measured: every tool runs in its own child process against the same local service "
        "(its own process, rate limits off unless stated); wall time is the child's run (imports excluded, "
        "as in nightly_sync.py); peak RSS is the child's own high-water mark (VmHWM, not `ru_maxrss`, which "
        "a vforked child inherits from its parent: benchmarks/memory.py), for dlt the larger of it and its "
        "workers'; HTTP requests are counted by the service itself (every request received: retries, 429s "
        "and faulted attempts included). Ours is `run_sync` with KOL detail enrichment off (so no peer fetches "
        "details either); the floor is nightly_sync.py's bare concurrent fetch loop (every page fetched and "
        "dropped). Runs alternate bare, ours, then each peer. Medians are over finished runs; a child whose "
        "resident memory (with its children) passes 60% of the machine's RAM is killed and counted as not finished.",
        "",
        *_peer_lines(results),
        "## Aims",
        "",
        "| aim | result | figures |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | **{r}** | {f} |" for a, r, f in aims(results)] or ["| - | not run | - |"]
    compare = results.get("compare")
    if compare:
        s = compare["summary"]
        peers = compare["peers"]
        lines += ["", f"## Full sync, side by side (medians of {len(compare['runs'])} runs)", "",
                  "| | wall time | peak RSS | HTTP requests | finished |", "|---|---|---|---|---|"]
        for name, label in (("ours", "our sync"), *((p, peer_label(p)) for p in peers),
                            ("bare", "bare fetch loop (floor)")):
            x = s[name]
            lines.append(f"| {label} | {fmt(x['seconds'], ' s', 2)} | {fmt(x['peak_rss_mb'], ' MB', 0)} | "
                         f"{fmt(x['requests'])} | {x['finished']}/{len(compare['runs'])} |")
        unfinished = {name: sorted({str(e) for e in s[name]["exits"] if e != 0} | set(s[name].get("errors", [])))
                      for name in ("ours", *peers)}
        for name, why in unfinished.items():
            if why:
                lines += ["", f"{name} did not finish every run: {'; '.join(why)}"]
        lines += ["", "Ratios per pair, run by run (finished runs only):", ""]
        lines += [f"- {k.replace('_', ' ')}: " + (", ".join(fmt(x, '', 2) for x in vals) or "no finished run")
                  for k, vals in s["ratios"].items()]
        lines += [""]
        for peer in peers:
            if not s[peer]["finished"]:
                continue
            lines += [f"Rows landed per table (last run), ours / {peer}: " + ", ".join(
                f"{t} {fmt(s['ours']['rows'][t])} / {fmt(s[peer]['rows'][t])}" for t in TABLES)
                + (f". **VOID**: rows differ in {', '.join(s['void'][peer])}." if s["void"][peer]
                   else ". Equal on every table."), ""]
    hostile = results.get("hostile")
    if hostile:
        lines += ["", "## Hostile servers", "",
                  f"faults: {json.dumps(FAULTS)} (probabilities per request); churn: {hostile['churn']['churn_per_second']:g} KOLs "
                  "created and as many archived per second through the service's store while the tool runs. "
                  "Landed rows are compared with the service's rows when the tool finished: missing (in the "
                  "service, not landed), extra, doubled (an id landed twice), stale (another updated_at or "
                  "archived flag than the service's at the end: a snapshot read while rows change is expected to "
                  "have some, as many as changed after their page was read). In flux: the rows the tool itself reports as "
                  "created or archived while it paged (ours names them in its run metadata, `rows_in_flux`; the peers "
                  "cannot tell).", "",
                  "| scenario | tool | finished | time | requests (server) | missing | extra | doubled | stale | in flux (reported) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for scenario, data in hostile.items():
            for tool in data.get("tools", ("ours", "dlt")):
                x = data[tool]
                t = x["truth"]
                total = lambda key: sum(t[table][key] for table in TABLES)  # noqa: E731
                detail = "; ".join(f"{table}: " + ", ".join(f"{k} {val}" for k, val in t[table].items() if val)
                                   for table in TABLES if any(v for k, v in t[table].items() if k != "note"))
                status = "yes" if x["exit"] == 0 else f"no (exit {x['exit']}: {x.get('error', '')[:140]})"
                counts = x["server"]["counts"]
                statuses = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()) if k != "requests")
                churned = x.get("churn")
                label = f"{scenario} ({churned['created']} created, {churned['archived']} archived)" if churned else scenario
                lines.append(f"| {label} | {tool} | {status} | {fmt(x.get('seconds'), ' s')} | "
                             f"{counts.get('requests')} ({statuses}) | {total('missing')} | {total('extra')} | "
                             f"{total('doubled')} | {total('stale')} | {_in_flux(x)} |")
                if detail:
                    lines.append(f"| | | | | | {detail} | | | | |")
    rate = results.get("ratelimit")
    if rate:
        lines += ["", "## Under a rate limit", "",
                  f"Plan {rate['plan']}: {rate['limit_per_window']} requests per {rate['window_seconds']:g} s window "
                  f"(the plan's minute, shortened). Floor = {rate['pages']} pages / {rate['limit_per_window']} x "
                  f"{rate['window_seconds']:g} s = {rate['floor_seconds']:.1f} s.", "",
                  "| tool | finished | wall time | / floor | requests | 429s in the first window | 429s after | "
                  "full windows: median requests served / limit |",
                  "|---|---|---|---|---|---|---|---|"]
        for tool in rate.get("tools", ("ours", "dlt")):
            x = rate[tool]
            lines.append(f"| {tool} | {'yes' if x['exit'] == 0 else 'no (' + x.get('error', '')[:100] + ')'} | "
                         f"{fmt(x.get('seconds'), ' s')} | {fmt(x.get('over_floor'), '', 2)} | "
                         f"{x['server']['counts'].get('requests')} | {x['first_window_429s']} | {x['later_429s']} | "
                         f"{fmt(x.get('window_use'), '', 3)} over {x.get('full_windows')} |")
        lines += ["", "The floor leaves out what a run costs without any limit (our sync's fixed start-up, dlt's "
                  "normalize and load): with few windows that cost dominates wall / floor. The last column is the "
                  "share of the limit each tool used in the windows fully inside its run (rate_limited_sync.py's "
                  "measure, aim >= 0.95)."]
    sizes = results.get("sizes")
    if sizes:
        lines += ["", "## Sync time against dataset size", ""]
        if chart:
            lines += [f"![sync wall time against KOLs]({chart})", ""]
        names = _size_tools(sizes)
        lines += ["| KOLs | " + " | ".join(names) + " | runs |", "|---|" + "---|" * len(names) + "---|"]
        for p in sizes:
            cells = []
            for name in names:
                exit_ = p.get("exits", {}).get(name, 0)
                cells.append(fmt(p.get(name), " s", 2) if p.get(name) is not None
                             else ("-" if exit_ == 0 else f"not finished ({exit_})"))
            lines.append(f"| {p['kols']:,} | " + " | ".join(cells) + f" | {p['runs']} |")
        failures = [(p["kols"], name, why) for p in sizes for name, why in p.get("errors", {}).items()]
        if failures:
            lines += ["", "Why a tool did not finish:", ""]
            lines += [f"- {name} at {kols:,} KOLs: {why}" for kols, name, why in failures]
    ours = results.get("ours")
    if ours:
        lines += ["", "## Our own figures", "", "Each script run as it is, its last printed lines quoted.", ""]
        for name, x in ours.items():
            lines.append(f"### {name}")
            lines.append("")
            if x["status"] == "not run":
                lines += [f"not run: {x['why']}", ""]
                continue
            lines += [f"`{x['command']}`: {x['status']} in {x['seconds']} s", "", "```", *x["output"], "```", ""]
    lines += _receivers_section()
    lines += _crm_matching_section()
    lines += _lake_s3_section()
    lines += _written_section("benchmarks-table-format.md")
    lines += ["", "## Caveats", "",
              "- The peers' extract threads (dlt) and concurrency level (PyAirbyte) equal the requests our sync and the "
              f"bare loop keep in flight ({CONCURRENCY}); dlt pages one list at a time per resource, PyAirbyte one "
              "partition at a time: neither fetches pages of one list side by side, as ours and the floor do. Neither "
              "sorts the lists (our sync walks them by created_at ascending).",
              "- dlt's loader file format decides most of its cost: with its default for DuckDB (insert_values, "
              "SQL INSERT statements) the load stage dominates time and memory; dlt's DuckDB page suggests parquet "
              "for speed, measured by default (`--dlt-format` names others, each a peer of its own).",
              "- PyAirbyte keeps only the fields its stream schemas declare (benchmarks/peer_airbyte.yaml declares "
              "every field of spec section 2's list items); its cache keeps nested objects and lists as JSON columns. "
              "Its merge (SQL MERGE of a read's rows into the cache table) matches rows already in the cache, not two "
              "rows of one read: a KOL archived between the reads of the two `kols` partitions lands twice (hostile, "
              "churn: doubled).",
              "- dlt's rows: its `kols` table gets archived KOLs from a second resource (is_archived=true) "
              "merged into the same table; nested lists land in child tables (kols__tags, ...), which are not "
              "compared. Only the four parent tables' rows are compared.",
              "- Our sync's figures are its whole job (lake Parquet, warehouse merges, analytics.duckdb "
              "published, checks); dlt's are extract, normalize and load into one DuckDB file; PyAirbyte's are "
              "the read into its local files and the load into its DuckDB cache.",
              "- Raw figures: `docs/benchmarks.json`."]
    return "\n".join(with_notes(lines, _notes())) + "\n"


NOTES = "benchmarks-notes.md"
CHART = "benchmarks-sync-time.png"


def _notes() -> dict[str, list[str]]:
    """The hand-written notes (docs/benchmarks-notes.md): under each `## heading`, prose the figures cannot say
    (how a figure came to be, what it does not cover), kept by every render."""
    path = DOCS / NOTES
    notes: dict[str, list[str]] = {}
    heading = None
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("## "):
            heading = line
            notes[heading] = []
        elif heading is not None:
            notes[heading].append(line)
    return {heading: _trimmed(body) for heading, body in notes.items() if _trimmed(body)}


def with_notes(lines: list[str], notes: dict[str, list[str]]) -> list[str]:
    """`lines` with each note at the end of the section of its heading. A note whose section is not on the page
    keeps its heading, before the caveats, so no render drops it."""
    notes, out, section = dict(notes), [], None

    def close_section() -> None:
        if section in notes:
            while out and not out[-1]:
                out.pop()
            out.extend(["", *notes.pop(section), ""])

    for line in lines:
        if line.startswith("## "):
            close_section()
            if line == "## Caveats":
                for heading in list(notes):
                    out.extend([heading, "", *notes.pop(heading), ""])
            section = line
        out.append(line)
    close_section()
    for heading in list(notes):
        out.extend(["", heading, "", *notes.pop(heading)])
    return out


def _trimmed(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _peer_lines(results: dict) -> list[str]:
    """The peers as they were configured for the figures shown, and a peer that could not run, with why."""
    setups = results.get("peer_setup")
    if not setups:  # figures measured before the peers were tuned
        return ["Peers: dlt's `benchmarks/peer_dlt.py` as dlt's docs configure rest_api (its default workers), once "
                "per loader file format: " + ", ".join(f"`{f}`" for f in _listed(results.get("dlt_format", "default")))
                + ".", ""]
    lines = [f"Peers, each configured at its best for {results['machine']['cores']} cores:", ""]
    lines += [f"- {peer_label(name)}: {setup}." for name, setup in setups.items()]
    airbyte = results.get("airbyte", {})
    if airbyte and not airbyte.get("ready"):
        lines.append(f"- PyAirbyte did not run: {airbyte['why']}.")
    return [*lines, ""]


def _receivers_section() -> list[str]:
    """Receiver throughput on each inbox store, from docs/benchmarks-receivers.json (written by
    `benchmarks/receiver_throughput.py --write`, a measurement of its own: it needs Postgres and haproxy)."""
    path = DOCS / "benchmarks-receivers.json"
    if not path.exists():
        return []
    figures = json.loads(path.read_text())
    lines = ["", "## Receivers behind a load balancer", "",
             f"Measured {figures['date']} with `{figures['command']}`: {figures['events']:,} signed events per "
             f"measurement, {figures['clients']} keep-alive client connections, the kinds in turn in each of "
             f"{figures['runs']} runs; Postgres local with fsync on, haproxy 2.6, all on the same {figures['cores']} cores "
             f"(1-minute load average {figures['load_average'][0]} before, {figures['load_average'][1]} after, other "
             "sessions' work included). How: docs/receiver.md, docs/deploy.md.", "",
             "| receivers | events/s (median) | p50 | p99 | events/s per run |", "|---|---|---|---|---|"]
    for kind in figures["kinds"].values():
        lines.append(f"| {kind['label']} | {kind['events_per_s']:,.0f} | {kind['p50_ms']:.2f} ms | {kind['p99_ms']:.2f} ms | "
                     + ", ".join(f"{value:,}" for value in kind["runs_events_per_s"]) + " |")
    for label, why in figures.get("not_measured", {}).items():
        lines.append(f"| {label} | not measured: {why} | | | |")
    if figures.get("ratios"):
        lines += ["", "Ratios of the medians: " + ", ".join(f"{name} {value:.2f}" for name, value in figures["ratios"].items())
                  + "." + (f" {figures['note']}" if figures.get("note") else "")]
    return lines
def _written_section(name: str) -> list[str]:
    """A section a benchmark of its own writes as markdown (e.g. `benchmarks/table_format.py --write`)."""
    path = DOCS / name
    return path.read_text().splitlines() if path.exists() else []


def _crm_matching_section() -> list[str]:
    """The CRM probable-match figures, from docs/benchmarks-crm-matching.json (written by
    `benchmarks/crm_matching.py all --write`, a measurement of its own: it needs no service), each aim judged
    from them."""
    path = DOCS / "benchmarks-crm-matching.json"
    if not path.exists():
        return []
    figures = json.loads(path.read_text())
    lines = ["", "## CRM probable matches", "",
             "`benchmarks/crm_matching.py` (data set: `benchmarks/crm_people.py`; method and the choice of the threshold: "
             "docs/crm-decisions-reconciliation.md). Aims: precision >= 0.98 at recall >= 0.90; <= 30 s and <= 2 GB at "
             "1M x 1M.", ""]
    held_out = [figures[key] for key in sorted(figures) if key == "quality" or key.startswith("quality_seed_")]
    if held_out:
        first = held_out[0]
        data = first["data"]
        lines += [f"Quality: {data['kols']:,} KOLs x {data['contacts']:,} contacts per seed "
                  f"({data['positives']} same people under another email, {data['namesakes']} namesakes, "
                  f"{data['duplicates']} CRM duplicates). Threshold {first['threshold']} ({_crm_choice(figures)}).", "",
                  "| held-out seed | measured | precision | recall | found | false | duplicate sets (pairs in one set): "
                  "precision / recall | aim |", "|---|---|---|---|---|---|---|---|"]
        for q in held_out:
            met = q["precision"] >= 0.98 and q["recall"] >= 0.90
            lines.append(f"| {q['seed']} | {q['date']}, `{q['command']}` | {q['precision']:.4f} | {q['recall']:.4f} | "
                         f"{q['found']} of {q['positives']} | {q['false']} | {q['duplicate_precision']:.4f} / "
                         f"{q['duplicate_recall']:.4f} | **{'met' if met else 'missed'}** |")
        lines += ["", f"Seed {first['seed']}: recall per kind of difference: "
                  + ", ".join(f"{k} {v}" for k, v in first["recall_by_kind"].items())
                  + ". Precision and recall per threshold: " + ", ".join(
                      f"{row['threshold']}: {row['precision']:.3f} / {row['recall']:.3f}" for row in first["sweep"]) + "."]
    scale = figures.get("scale")
    if scale:
        met = scale["median_seconds"] <= 30 and scale["peak_rss_mb"] <= 2048
        cpu = statistics.median(scale["cpu"])
        lines += ["", f"Scale, measured {scale['date']} with `{scale['command']}`: {scale['kols']:,} KOLs x "
                  f"{scale['contacts']:,} contacts, the whole reconciliation (email "
                  f"pass, probable matches, duplicate sets), DuckDB threads={scale['threads']}, memory_limit="
                  f"{scale['memory_limit']}: **median {scale['median_seconds']} s** of runs {scale['runs']} s "
                  f"(CPU {scale['cpu']} s), **peak RSS {scale['peak_rss_mb']} MB**: aims **{'met' if met else 'missed'}**. "
                  f"Its CPU, a median of {cpu:.1f} s, allows {cpu / 2:.1f} s at best on 2 cores."
                  + (f" {scale['note']}" if scale.get("note") else "")]
    return lines


def _crm_choice(figures: dict) -> str:
    """How the threshold was chosen: on the development seeds (`crm_matching.py choose`), never on the held-out one."""
    choice = figures.get("choice")
    if not choice:
        return "chosen on seed 1: the lowest of the grid with precision less one standard error >= 0.98"
    seeds = ", ".join(f"{seed} ({t})" for seed, t in choice.get("per_seed", {}).items())
    row = next((r for r in choice["sweep"] if r["threshold"] == choice["chosen"]), None)
    at = f"; the seeds pooled there: {row['precision']:.4f} / {row['recall']:.4f}" if row else ""
    return (f"chosen {choice['date']} with `{choice['command']}`: the lowest of the grid at which each development seed's "
            f"precision less one standard error is >= 0.98, i.e. the largest of each seed's own choice: {seeds}{at}")


def _lake_s3_section() -> list[str]:
    """The lake and warehouse local against the lake on S3 and against the lake on S3 plus the Iceberg tables,
    from docs/benchmarks-lake-s3.json (written by `benchmarks/lake_s3.py --write`, a measurement of its own)."""
    path = DOCS / "benchmarks-lake-s3.json"
    if not path.exists():
        return []
    f = json.loads(path.read_text())
    arms = [("local", "lake and warehouse local", None, None), ("s3", "lake on S3", "ratio", "ratios"),
            ("iceberg", "lake on S3 + Iceberg tables", "iceberg_ratio", "iceberg_ratios")]
    arms = [arm for arm in arms if f"{arm[0]}_median" in f]  # figures written before the Iceberg arm have two
    def listed(values: list) -> str:
        return ", ".join(map(str, values))

    rows = [f"| {label} | {f[arm + '_median']:.2f} s | {listed(f[arm + '_seconds'])} | "
            f"{f[arm + '_peak_rss_mb']} MB | "
            + (f"**{f[ratio]:.2f}** ({listed(f[ratios])}) |" if ratio else " |")
            for arm, label, ratio, ratios in arms]
    return ["", "## The lake on S3 and the Iceberg tables", "",
            f"Measured {f['date']} with `{f['command']}`: the core sync (KOL details off) of {f['kols']:,} KOLs into a "
            "fresh data directory, alternated in one run, each sync in its own process: the lake and the warehouse "
            "local (the default); the lake on S3 (`COMMOPS_LAKE_URL`, moto's S3 API server on 127.0.0.1, objects in its "
            "memory); the lake on S3 and the current-state tables also published as Iceberg tables "
            "(`COMMOPS_ICEBERG_*`: a fresh SQL catalog in Postgres 15 with fsync on, data files in a fresh bucket "
            "of the same S3 server). The warehouse and `analytics.duckdb` stay in the data directory in every arm. "
            "The ratios are the cost of the protocols (upload, manifest, download for the warehouse load, Iceberg "
            "commits of every row), not of a network.", "",
            "| arm | median wall time | runs | peak RSS | / local, medians (run by run) |",
            "|---|---|---|---|---|", *rows, "",
            f"1-minute load average after each round: {', '.join(map(str, f['load_average']))} (other sessions' work "
            "on the 2 cores)."]


def _size_tools(sizes: list[dict]) -> list[str]:
    names = ["ours"] + sorted({k for p in sizes for k in p if k.startswith("dlt")}) + [AIRBYTE_PEER, "bare"]
    return [n for n in names if any(n in p for p in sizes)]


def write_chart(sizes: list[dict]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    xs = [p["kols"] for p in sizes]
    styles = iter(("o-", "D-", "v-", "P-"))
    for name in _size_tools(sizes):
        label = {"ours": "our sync", "bare": "bare fetch loop (floor)"}.get(name) or peer_label(name)
        style = {"ours": "s-", "bare": "^--"}.get(name) or next(styles)
        ys = [p.get(name) if p.get(name) is not None else math.nan for p in sizes]
        if all(math.isnan(y) for y in ys):
            continue
        line, = ax.plot(xs, ys, style, label=label)
        for p in sizes:  # a run that did not finish: an x above every finished point at that size
            if p.get(name) is None and p.get("exits", {}).get(name, 0) != 0:
                top = max(p[n] for n in _size_tools(sizes) if p.get(n) is not None) * 1.6
                ax.plot([p["kols"]], [top], "x", color=line.get_color(), markersize=9)
                ax.annotate(f"{name}: not finished", (p["kols"], top), textcoords="offset points", xytext=(0, 7),
                            color=line.get_color(), fontsize=8, ha="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.5)  # room for the not-finished labels
    ax.set_xticks(xs, [f"{x / 1e6:g}M" if x >= 1_000_000 else f"{x / 1e3:g}k" for x in xs])
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.set_xlabel("KOLs (other lists scaled with them)")
    ax.set_ylabel("full sync wall time (s, log scale)")
    ax.set_title("Full sync wall time against dataset size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = DOCS / CHART
    fig.savefig(path)
    plt.close(fig)
    return path.name


def print_table(results: dict) -> None:
    print("\n== aims ==")
    for aim, verdict, figures in aims(results):
        print(f"  {verdict:5} {aim}: {figures}")
    compare = results.get("compare")
    if compare:
        s = compare["summary"]
        print("\n== full sync, medians ==")
        print(f"  {'':18} {'seconds':>9} {'peak MB':>9} {'requests':>9} finished")
        for name in ("ours", *compare["peers"], "bare"):
            x = s[name]
            print(f"  {name:18} {fmt(x['seconds'], '', 2):>9} {fmt(x['peak_rss_mb'], '', 0):>9} "
                  f"{fmt(x['requests']):>9} {x['finished']}/{len(compare['runs'])}")
        for name in ("ours", *compare["peers"]):
            print(f"  rows {name:18} {s[name]['rows']}")


FORMATS = ("default", "parquet", "jsonl", "insert_values")


def _formats(value: str, option: str) -> list[str]:
    formats = [f.strip() for f in value.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        raise SystemExit(f"{option}: unknown loader file format {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(FORMATS)}")
    return formats


def _airbyte_peer(left_out: bool) -> dict:
    """Whether PyAirbyte runs in this invocation, and why not: its venv is made here, before any measurement."""
    if left_out:
        return {"ready": False, "why": "left out with --no-airbyte"}
    try:
        python = peer_airbyte.ensure_venv()
    except (SystemExit, OSError, subprocess.CalledProcessError) as error:
        why = f"its venv could not be made: {error}"
        print(f"PyAirbyte left out: {why}", flush=True)
        return {"ready": False, "why": why}
    return {"ready": True, "python": str(python), "package": peer_airbyte.AIRBYTE}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke mode: 10,000 KOLs, 2 runs, small sizes")
    parser.add_argument("--kols", type=int, help="KOLs seeded (default 100,000; --quick 10,000)")
    parser.add_argument("--runs", type=int, help="runs per tool (default 5; --quick 2)")
    parser.add_argument("--sizes", help="KOL counts for the chart, e.g. 10000,100000,300000 (default: 2500 and --kols)")
    parser.add_argument("--seed-cache", type=Path,
                        help="seed each size once into this folder and copy it afterwards (as nightly_sync.py does)")
    parser.add_argument("--size-timeout", type=float, default=CHILD_TIMEOUT,
                        help=f"seconds a tool may take at one size before it is killed (default {CHILD_TIMEOUT})")
    parser.add_argument("--only", help=f"comma-separated, of {','.join(BENCHMARKS)} or single scripts of 'ours' "
                                       f"({','.join(OURS)}) (default: all)")
    parser.add_argument("--skip", default="", help="scripts of 'ours' not to run, e.g. webhook_latency")
    parser.add_argument("--rate-plan", default="starter", help="plan of the rate-limit benchmark (default starter)")
    parser.add_argument("--rate-window", type=float, default=2.0, help="rate window in seconds (default 2)")
    parser.add_argument("--churn", type=float, default=CHURN_PER_SECOND,
                        help=f"KOLs created and archived per second in the churn scenario (default {CHURN_PER_SECOND:g})")
    parser.add_argument("--dlt-format", default="parquet",
                        help="dlt's loader_file_format(s) in compare and sizes, comma-separated, each a peer of its "
                             f"own ({', '.join(FORMATS)}; default: parquet, which dlt's DuckDB page suggests; "
                             "`default` is dlt's own default for DuckDB, insert_values)")
    parser.add_argument("--hostile-dlt-format", default="parquet",
                        help="the same for hostile and ratelimit (default parquet)")
    parser.add_argument("--dlt-plain", action="store_true",
                        help="also dlt untuned (no parallelized, dlt's default workers), a peer of its own per "
                             "--dlt-format (`dlt-parquet-plain`), in compare and sizes: whether the tuning pays here")
    parser.add_argument("--no-airbyte", action="store_true",
                        help=f"leave PyAirbyte out (else its venv is made on first use: {peer_airbyte.venv_dir()})")
    parser.add_argument("--merge", action="store_true",
                        help="keep the sections, and our scripts, of docs/benchmarks.json this run does not measure (a full run in parts)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--render", action="store_true",
                        help="only write docs/benchmarks.md and the chart again from docs/benchmarks.json")
    args = parser.parse_args()
    if args.render:
        results = json.loads((DOCS / "benchmarks.json").read_text())
        chart = write_chart(results["sizes"]) if results.get("sizes") else None
        drawn = chart
        if results.get("sizes") and chart is None and (DOCS / CHART).exists():
            chart = CHART  # drawn from these same figures before; matplotlib (the `bench` extra) is not here
            print(f"matplotlib is missing: docs/{CHART} kept as it is, not drawn again", file=sys.stderr)
        (DOCS / "benchmarks.md").write_text(write_page(results, chart))
        print("wrote docs/benchmarks.md" + (f", docs/{drawn}" if drawn else "") + " from docs/benchmarks.json")
        return
    formats = _formats(args.dlt_format, "--dlt-format")
    hostile_formats = _formats(args.hostile_dlt_format, "--hostile-dlt-format")
    args.kols = args.kols or (10_000 if args.quick else 100_000)
    args.runs = args.runs or (2 if args.quick else 5)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    only = [s.strip() for s in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = set(only) - set(BENCHMARKS) - set(OURS)
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}; choose from {', '.join(BENCHMARKS + OURS)}")
    if set(only) & set(OURS):  # scripts of `ours` named one by one: those and no others
        args.skip |= set(OURS) - set(only) if "ours" not in only else set()
        only = [name for name in BENCHMARKS if name in only or name == "ours"]
    sizes = sorted({int(s) for s in args.sizes.split(",")}) if args.sizes else sorted({2_500, args.kols})
    try:
        import dlt  # noqa: F401
    except ImportError:
        raise SystemExit("dlt is missing: .venv/bin/pip install -q -e '.[dev,bench]'") from None
    airbyte = _airbyte_peer(args.no_airbyte)
    peers = [*map(peer_name, formats), *(f"{peer_name(f)}-plain" for f in formats if args.dlt_plain),
             *([AIRBYTE_PEER] if airbyte["ready"] else [])]
    hostile_peers = [*map(peer_name, hostile_formats), *([AIRBYTE_PEER] if airbyte["ready"] else [])]

    started = time.perf_counter()
    command = shlex.join(["python", "-m", "benchmarks", *sys.argv[1:]])
    results = {}
    if args.merge and (DOCS / "benchmarks.json").exists():
        results = json.loads((DOCS / "benchmarks.json").read_text())
        if results.get("kols") != args.kols:
            raise SystemExit(f"--merge: docs/benchmarks.json was measured at {results.get('kols')} KOLs, "
                             f"this run at {args.kols}: run with the same --kols or without --merge")
    commands = [c for c in results.get("commands", [results["command"]] if "command" in results else [])]
    dates, now = results.get("command_dates") or [results.get("date")] * len(commands), datetime.now(UTC)
    results.update({"date": now.strftime("%Y-%m-%d %H:%M UTC"), "command": command,
                    "commands": commands + [command], "command_dates": [*dates, now.strftime("%Y-%m-%d %H:%M UTC")],
                    "quick": args.quick, "kols": args.kols, "runs": args.runs,
                    "machine": machine(), "dlt_format": formats, "hostile_dlt_format": hostile_formats,
                    "airbyte": airbyte})
    results.setdefault("peer_setup", {}).update(peer_setup(sorted(set(peers) | set(hostile_peers))))
    results["benchmarks"] = sorted(set(results.get("benchmarks", [])) | set(only), key=BENCHMARKS.index)

    probes = results.setdefault("host_probes", {})

    def save(section: str, value) -> None:
        """Each benchmark's figures land as soon as it ends: a later failure loses only its own."""
        results[section] = value
        probes[section] = round(host_probe(), 3)
        if not args.no_write:
            (DOCS / "benchmarks.json").write_text(json.dumps(strip_state(results), indent=1, default=str) + "\n")

    with tempfile.TemporaryDirectory(prefix="commops-bench-all-") as tmp:
        work = Path(tmp)
        needs_seed = {"compare", "hostile", "ratelimit"} & set(only) or ("sizes" in only and args.kols in sizes)
        if needs_seed:
            (work / "main").mkdir()
            db, key = seed_service(work / "main", args.kols / 100_000, args.seed_cache)
        if "compare" in only:
            print(f"\n== compare: ours, {', '.join(peers)}, bare at {args.kols:,} KOLs, "
                  f"{args.runs} runs ==", flush=True)
            save("compare", bench_compare(db, key, args.runs, work, peers))
        if "hostile" in only:
            print("\n== hostile servers ==", flush=True)
            save("hostile", bench_hostile(db, key, work, args.churn, hostile_peers))
        if "ratelimit" in only:
            print(f"\n== rate limit: plan {args.rate_plan}, {args.rate_window:g} s window ==", flush=True)
            pages = results.get("compare", {}).get("summary", {}).get("bare", {}).get("requests")
            save("ratelimit", bench_ratelimit(db, key, work, args.rate_window, args.rate_plan,
                                              int(pages) if pages else None, hostile_peers))
        if "sizes" in only:
            print(f"\n== sizes {sizes} ==", flush=True)
            save("sizes", bench_sizes(sizes, results.get("compare"), args.kols, work, peers, args.size_timeout,
                                      args.seed_cache))
        if "ours" in only:
            print("\n== our own benchmark scripts ==", flush=True)
            ours = bench_ours(args, work)
            if args.merge:  # the scripts left out keep their figures from the run merged into
                kept = results.get("ours") or {}
                ours = {name: kept.get(name, figures) if name in args.skip else figures for name, figures in ours.items()}
            save("ours", ours)
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    results["command_seconds"] = results.get("command_seconds", [None] * len(commands)) + [results["total_seconds"]]
    results["rusage_children_max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    results = strip_state(results)
    print_table(results)
    if not args.no_write:
        chart = write_chart(results["sizes"]) if results.get("sizes") else None
        (DOCS / "benchmarks.md").write_text(write_page(results, chart))
        (DOCS / "benchmarks.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(f"\nwrote docs/benchmarks.md, docs/benchmarks.json{', docs/' + chart if chart else ''} "
              f"in {results['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
