"""benchmarks/suite_time.py: the suite's time and where its processor time goes, recorded by its plugin in each
xdist worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_of_the_run_is_accounted_for_by_the_workers_and_its_file_listed():
    done = subprocess.run([sys.executable, "benchmarks/suite_time.py", "--top", "5", "--",
                           "tests/benchmarks/test_in_flight.py", "-p", "no:cacheprovider", "-n", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "2 passed" in lines[0]
    assert lines[1].startswith("wall ") and lines[1].endswith(": met")
    assert lines[3].startswith("2 tests, ")  # both, recorded in the worker that ran them
    assert lines[-1].split()[-2:] == ["2", "tests/benchmarks/test_in_flight.py"]
