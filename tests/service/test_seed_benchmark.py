"""The paging benchmark stays runnable: a tiny walk completes and verifies its ids."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_paging_benchmark_walks_every_kol_of_a_small_seed(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "service_paging.py"), "--kols", "250", "--campaigns", "5",
         "--products", "5", "--signals", "10", "--events", "5", "--runs", "1", "--per-page", "20",
         "--db", str(tmp_path / "service.db")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "seed: 250 KOLs" in result.stdout
    assert re.search(r"walk 1: 250 KOLs, 13 pages .* distinct ids = total", result.stdout), result.stdout
