"""The code location of benchmarks/dagster_overhead.py: the pipeline's definitions plus `noop`, a
one-op job doing nothing, whose whole run time is Dagster's own per-run overhead."""

from __future__ import annotations

import dagster as dg

from pipelines.definitions import make_definitions
from resources.settings import load_settings

NOOP = "noop"


@dg.op
def nothing() -> None:
    return None


@dg.job(name=NOOP, executor_def=dg.in_process_executor)
def noop() -> None:
    nothing()


@dg.definitions
def defs() -> dg.Definitions:
    settings = load_settings()
    return dg.Definitions.merge(make_definitions(settings), dg.Definitions(jobs=[noop]))
