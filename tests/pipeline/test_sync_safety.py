"""What a run leaves behind: no secret in Dagster's storage, no past date filled with today's data,
no half-written file from a run that was killed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import duckdb

from assets.snapshot_date import today
from tests.pipeline.sync_support import query

REPO = Path(__file__).resolve().parents[2]


def _commops(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commops_cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env.update(overrides)
    return env


def _stored_texts(home: Path) -> Iterator[tuple[str, bytes]]:
    """Every file under `home` as bytes, and every value of every SQLite table in it, decompressed
    where Dagster compresses (run and job snapshots are zlib-compressed blobs)."""
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        yield str(path), raw
        if not raw.startswith(b"SQLite format 3"):
            continue
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    for value in row:
                        if isinstance(value, str):
                            yield f"{path}:{table}", value.encode()
                        elif isinstance(value, bytes):
                            yield f"{path}:{table}", value
                            try:
                                yield f"{path}:{table} (zlib)", zlib.decompress(value)
                            except zlib.error:
                                pass
        finally:
            conn.close()


def test_the_api_key_is_nowhere_in_dagsters_run_storage_or_event_logs(make_service, tmp_path):
    service = make_service(kols=120, campaigns=3, products=3, signals=5)
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = _env(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key, DAGSTER_HOME=str(home))
    result = _commops("sync", "--data-dir", str(tmp_path / "data"), "--no-progress", "--no-marts", "--enrich-limit", "5", env=env)
    assert result.returncode == 0, result.stderr

    texts = list(_stored_texts(home))
    assert any(b"nightly_sync" in text for _, text in texts)  # the run really is in this storage
    assert any(b"COMMOPS_API_KEY" in text for _, text in texts)  # stored as the EnvVar's name ...
    leaks = sorted({where for where, text in texts if service.api_key.encode() in text})
    assert leaks == []  # ... never as its value
    assert service.api_key not in result.stdout + result.stderr


def test_a_past_snapshot_date_is_refused_in_one_line_before_any_request(make_service, tmp_path):
    service = make_service(kols=20)
    env = _env(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key)
    data_dir = tmp_path / "data"
    result = _commops("sync", "--date", "2026-01-15", "--data-dir", str(data_dir), "--no-progress", "--no-marts", env=env)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("commops sync failed: --date 2026-01-15: the API serves only its current data")
    assert f"only be dated today ({today()}" in lines[0]
    assert not data_dir.exists()


def test_a_malformed_date_is_refused_and_todays_date_is_accepted(make_service, tmp_path):
    service = make_service(kols=20, campaigns=2, products=2, signals=2)
    env = _env(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key)
    bad = _commops("sync", "--date", "23/11/2026", "--data-dir", str(tmp_path / "data"), "--no-progress", "--no-marts", env=env)
    assert bad.returncode == 1 and bad.stderr.strip() == "commops sync failed: --date 23/11/2026: not a date (YYYY-MM-DD)"

    good = _commops("sync", "--date", today(), "--data-dir", str(tmp_path / "data"), "--no-progress", "--no-marts", env=env)
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "data" / "lake" / "org=default" / "kols" / f"snapshot_date={today()}" / "data.parquet").exists()
    assert query(tmp_path / "data" / "analytics.duckdb", "SELECT DISTINCT _snapshot_date::VARCHAR FROM kols") == [(today(),)]


_KILLED_WHILE_PUBLISHING = """
import os, shutil, sys, time
from resources.warehouse import WarehouseResource

def copy_then_hang(source, target):  # the real copy, cut off half-way: as a kill during a large copy would
    data = open(source, "rb").read()
    with open(target, "wb") as out:
        out.write(data[: len(data) // 2])
    print("copying", flush=True)
    time.sleep(120)

shutil.copyfile = copy_then_hang
WarehouseResource(data_dir=sys.argv[1]).publish_analytics()
"""


def test_a_sync_killed_while_publishing_analytics_leaves_nothing_the_next_run_does_not_remove(make_service, tmp_path):
    service = make_service(kols=150, campaigns=3, products=3, signals=10)
    data_dir = tmp_path / "data"
    env = _env(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key)
    assert _commops("sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts", env=env).returncode == 0

    publisher = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_PUBLISHING, str(data_dir)], cwd=REPO,
                                 env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert publisher.stdout.readline().strip() == "copying"
    finally:
        publisher.send_signal(signal.SIGKILL)
        publisher.wait(timeout=30)
    leftovers = list(data_dir.glob(".analytics.duckdb.*.tmp"))
    assert [p.name.split(".")[3] for p in leftovers] == [str(publisher.pid)]  # the killed copy is there ...

    result = _commops("sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts", env=env)
    assert result.returncode == 0, result.stderr
    assert list(data_dir.glob(".analytics.duckdb.*.tmp")) == []  # ... and the next run removed it
    conn = duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True)
    try:
        assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == 150
    finally:
        conn.close()


HOLD_SYNC_LOCK = """
import sys, time
from pathlib import Path
from resources.files import holding_lock
with holding_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_sync_of_an_organization_fails_at_once_naming_the_process_that_holds_it(make_service, tmp_path):
    service = make_service(kols=20, campaigns=2, products=2, signals=2)
    env = _env(COMMOPS_BASE_URL=service.base_url, COMMOPS_API_KEY=service.api_key)
    data_dir = tmp_path / "data"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SYNC_LOCK, str(data_dir / "locks" / "sync-default.lock")],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = _commops("sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts", env=env)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)

    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (f"commops sync failed: a sync of default is already running (pid {holder.pid}): "
                                      "one sync per organization at a time")
    assert not (data_dir / "lake" / "org=default" / "kols").exists()

    after = _commops("sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts", env=env)  # released with its holder
    assert after.returncode == 0, after.stderr
