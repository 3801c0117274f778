"""Benchmark: what Dagster alone costs a nightly run of our asset graph, and what a graph of another shape would.

    .venv/bin/python benchmarks/dagster_floor.py [--runs 7]

Builds the nightly job's graph as `commops sync` runs it (marts left out, as in nightly_sync.py's fixed-cost
run) from the code location itself: the same asset keys, dependencies, check specs (blocking or not) and
partitions, the console logging of `commops sync`, each step's body replaced by one that does nothing but report its materializations and its checks
as passed. So a run of it costs exactly Dagster's part of a run: planning, the run's creation with its planned
events, each step's events and data-version lookups, each check's evaluation. Shapes, each a job of its own:

- `today`: one step per asset, as the code location has them;
- `checks in the materialization`: today's, each asset's check results carried in its MaterializeResult instead of
  yielded after it (Dagster then resolves each twice, each time a lookup of the partition's latest
  materialization), as the assets did before;
- `one step`: every asset of the run in one multi-asset step (dependencies inside it dropped: Dagster looks
  none of them up);
- `one check per asset`: the steps of today, each asset's checks reported as one;
- `one step, one check per asset`: both;
- `no checks`: the steps of today without checks.

Alternating shape by shape, each run in a fresh ephemeral instance (as nightly_sync.py's runs), in this process;
prints each shape's median wall time of --runs and the events it stores. Compare `today` with the fixed cost
nightly_sync.py measures (the same graph with our work in it): the difference is our own work's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from assets.partitions import ORGS  # noqa: E402
from benchmarks.nightly_sync import host_probe  # noqa: E402
from commops_cli.in_process import QUIET_CONSOLE  # noqa: E402
from pipelines.definitions import make_definitions  # noqa: E402
from pipelines.jobs import NIGHTLY_SYNC  # noqa: E402
from resources.settings import load_settings  # noqa: E402

ORG = "default"


def nightly_graph() -> list[tuple[list[dg.AssetKey], dict[dg.AssetKey, set[dg.AssetKey]], list[dg.AssetCheckSpec]]]:
    """The nightly run's steps as (asset keys, each key's dependencies, check specs), in the code location's order."""
    with tempfile.TemporaryDirectory() as data_dir:
        job = make_definitions(load_settings(data_dir=data_dir), marts=False).resolve_job_def(NIGHTLY_SYNC)
    selected = set(job.asset_layer.selected_asset_keys)
    steps = []
    for assets_def in job.asset_layer.asset_graph.assets_defs:
        keys = sorted((k for k in assets_def.keys if k in selected), key=lambda k: k.to_user_string())
        if not keys:
            continue
        deps = {k: set(assets_def.asset_deps.get(k, set())) for k in keys}
        checks = [spec for spec in assets_def.check_specs if spec.asset_key in keys]
        steps.append((keys, deps, checks))
    return steps


def _noop_step(name: str, keys: list[dg.AssetKey], deps: dict[dg.AssetKey, set[dg.AssetKey]],
               checks: list[dg.AssetCheckSpec], *, carried: bool = False) -> dg.AssetsDefinition:
    inside = set(keys)

    @dg.multi_asset(name=name, partitions_def=ORGS, check_specs=checks,
                    specs=[dg.AssetSpec(k, deps=[d for d in deps[k] if d not in inside]) for k in keys])
    def step():
        for key in keys:
            results = [dg.AssetCheckResult(asset_key=key, check_name=spec.name, passed=True)
                       for spec in checks if spec.asset_key == key]
            if carried:  # inside the MaterializeResult, as the assets yielded them before
                yield dg.MaterializeResult(asset_key=key, metadata={"rows": 1}, check_results=results)
            else:  # apart, as the code location's assets yield them (assets/checks.py apart)
                yield dg.MaterializeResult(asset_key=key, metadata={"rows": 1})
                yield from results

    return step


def _one_per_asset(checks: list[dg.AssetCheckSpec]) -> list[dg.AssetCheckSpec]:
    keys = dict.fromkeys(spec.asset_key for spec in checks)
    return [dg.AssetCheckSpec("checks", asset=key, blocking=any(s.blocking for s in checks if s.asset_key == key))
            for key in keys]


def shapes(steps) -> dict[str, dg.JobDefinition]:
    def job(assets: list[dg.AssetsDefinition]) -> dg.JobDefinition:
        defs = dg.Definitions(assets=assets, jobs=[dg.define_asset_job(
            "floor", selection=dg.AssetSelection.all(), executor_def=dg.in_process_executor)])
        return defs.resolve_job_def("floor")

    def per_step(check_shape: Callable, carried: bool = False) -> list[dg.AssetsDefinition]:
        return [_noop_step(f"step_{i}", keys, deps, check_shape(checks), carried=carried)
                for i, (keys, deps, checks) in enumerate(steps)]

    def one_step(check_shape: Callable) -> list[dg.AssetsDefinition]:
        keys = [k for s in steps for k in s[0]]
        deps = {k: d for s in steps for k, d in s[1].items()}
        return [_noop_step("nightly", keys, deps, check_shape([c for s in steps for c in s[2]]))]

    return {
        "today": job(per_step(list)),
        "checks in the materialization": job(per_step(list, carried=True)),
        "one step": job(one_step(list)),
        "one check per asset": job(per_step(_one_per_asset)),
        "one step, one check per asset": job(one_step(_one_per_asset)),
        "no checks": job(per_step(lambda checks: [])),
    }


def run_once(job: dg.JobDefinition) -> tuple[float, int]:
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(ORGS.name, [ORG])
        started = time.perf_counter()
        result = job.execute_in_process(instance=instance, partition_key=ORG, run_config=QUIET_CONSOLE)
        seconds = time.perf_counter() - started
        assert result.success
        return seconds, len(instance.all_logs(result.run_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    steps = nightly_graph()
    jobs = shapes(steps)
    checks = sum(len(s[2]) for s in steps)
    print(f"the nightly's graph: {sum(len(s[0]) for s in steps)} assets in {len(steps)} steps, {checks} checks")
    for job in jobs.values():
        run_once(job)  # warm: imports and caches, as a deployment's process has them
    times: dict[str, list[float]] = {name: [] for name in jobs}
    events: dict[str, int] = {}
    probes = []
    for _ in range(args.runs):
        probes.append(host_probe())
        for name, job in jobs.items():
            seconds, events[name] = run_once(job)
            times[name].append(seconds)
    print(f"host probe median {statistics.median(probes):.2f} s (0.21 s idle and fast; higher, the host is throttled)")
    print(f"{'shape':32} {'median':>8} {'events':>7}  runs (s)")
    for name, runs in times.items():
        print(f"{name:32} {statistics.median(runs):7.3f}s {events[name]:7d}  " + ", ".join(f"{r:.3f}" for r in runs))


if __name__ == "__main__":
    main()
