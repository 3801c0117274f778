"""The benchmarks' peak-memory figure is the child's own, not its parent's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from benchmarks.memory import own_peak_rss_mb
held = bytearray(int(sys.argv[1]) * 2**20)  # touched: bytearray zero-fills
print(json.dumps({"peak": own_peak_rss_mb()}))
"""


def child_peak(megabytes: int) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(megabytes)], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)["peak"]


def test_a_child_of_a_large_parent_reports_its_own_peak_not_the_parents():
    ballast = bytearray(600 * 2**20)  # the parent is 600 MB larger than the child will ever be
    small, large = child_peak(10), child_peak(200)
    del ballast

    assert small < 150
    assert large - small > 150  # what the child itself allocated is counted
