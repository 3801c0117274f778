"""Benchmark: the README's test command, timed whole, and where its processor time goes.

    .venv/bin/python benchmarks/suite_time.py [--top 15] [-- PYTEST ARGS]

Runs `pytest` as the README does (two xdist workers, from pyproject's addopts) with this module loaded as a pytest
plugin in every worker, which records each test's wall time and the processor time its worker spent on it, apart from
that of the processes the test started and waited for. Prints the suite's wall time against the aim of 12 minutes, the
processor time of the whole process tree against what the two cores could give, that time split between the tests'
own processes, the processes they started and waiting, and the test files costing the most.

A process a test starts and never waits for (a server it kills at the end counts once reaped) is charged to whichever
test is running when it is reaped: read the split per file as an estimate, the totals as exact. Run nothing else
beside it: the suite uses both cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AIM_SECONDS = 12 * 60
RECORD_ENV = "COMMOPS_SUITE_TIME_RECORD"  # the file each worker appends its tests' lines to


def _processor_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    record = os.environ.get(RECORD_ENV)
    if not record:
        yield
        return
    started = time.monotonic()
    own, children = _processor_seconds(resource.RUSAGE_SELF), _processor_seconds(resource.RUSAGE_CHILDREN)
    yield
    line = {"test": item.nodeid, "wall": time.monotonic() - started,
            "own": _processor_seconds(resource.RUSAGE_SELF) - own,
            "children": _processor_seconds(resource.RUSAGE_CHILDREN) - children}
    with open(record, "a", encoding="utf-8") as out:  # one short line per write: appends from two workers stay whole
        out.write(json.dumps(line) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=15, help="test files to list, costliest first")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. a folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "tests.jsonl"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.suite_time", *args.pytest_args],
                              cwd=ROOT, env=_environment(record), stdout=subprocess.PIPE, text=True)
        wall = time.monotonic() - started
        processor = _processor_seconds(resource.RUSAGE_CHILDREN)
        tests = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"pytest exited {done.returncode}")
    _report(wall, processor, tests, args.top)
    sys.exit(done.returncode)


def _environment(record: Path) -> dict[str, str]:
    """This process's environment, with the record's path and the repository importable (the workers load the plugin
    by its module name)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, RECORD_ENV: str(record), "PYTHONPATH": path}


def _report(wall: float, processor: float, tests: list[dict], top: int) -> None:
    cores = os.cpu_count() or 1
    verdict = "met" if wall <= AIM_SECONDS else "missed"
    print(f"wall {wall:.0f} s ({wall / 60:.1f} min) against the aim of {AIM_SECONDS / 60:.0f} min: {verdict}")
    print(f"processor {processor:.0f} s of the {wall * cores:.0f} s {cores} cores could give ({processor / (wall * cores):.0%})")
    spent = sum(t["wall"] for t in tests)
    own, children = sum(t["own"] for t in tests), sum(t["children"] for t in tests)
    print(f"{len(tests)} tests, {spent:.0f} s of worker time: their own processes {own:.0f} s of processor, "
          f"the processes they started {children:.0f} s, waiting {spent - own - children:.0f} s")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for test in tests:
        row = files[test["test"].split("::")[0]]
        row[0] += test["wall"]
        row[1] += test["own"]
        row[2] += test["children"]
        row[3] += 1
    print(f"\n{'processor':>9} {'own':>6} {'started':>7} {'wall':>6} {'tests':>5}  file")
    for name, (file_wall, file_own, file_children, count) in sorted(files.items(),
                                                                     key=lambda kv: -(kv[1][1] + kv[1][2]))[:top]:
        print(f"{file_own + file_children:9.1f} {file_own:6.1f} {file_children:7.1f} {file_wall:6.1f} {count:5d}  {name}")


if __name__ == "__main__":
    main()
