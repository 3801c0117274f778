"""The signal search benchmark stays runnable: its three layouts answer every term alike."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_signal_search_benchmark_compares_the_three_layouts_on_a_small_seed():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "signal_search.py"), "--signals", "300", "--rounds", "1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr  # it exits non-zero when the layouts disagree
    assert "now: 0 of 300 signals keep a folded copy" in result.stdout
    assert len(re.findall(r"search=\S+ \([\d,]+ matches\).*now / before \d+\.\d\d", result.stdout)) == 3, result.stdout
    assert re.search(r"file size: before \d+ MB, copy \d+ MB, now \d+ MB", result.stdout), result.stdout
