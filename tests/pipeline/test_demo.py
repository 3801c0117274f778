"""`commops demo`, the README's first command: seed and serve the local service, sync it, say where the data is."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import duckdb


def _demo(data_dir) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "demo", "--data-dir", str(data_dir), "--kols", "120"],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL, check=False,
    )


def test_demo_syncs_the_seeded_local_service_and_a_second_run_reuses_it(tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Seeding the local service" in first.stdout
    assert "analytics.duckdb" in first.stdout

    with duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == 120
        assert conn.execute("SELECT count(*) FROM kol_details").fetchone()[0] > 0
    credentials = tmp_path / "service" / "demo-credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600  # the API key is readable by its owner only

    second = _demo(tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Seeding the local service" not in second.stdout  # same database, same key
    api_key = json.loads(credentials.read_text())["api_key"]
    assert api_key not in first.stdout + first.stderr + second.stdout + second.stderr  # never printed
