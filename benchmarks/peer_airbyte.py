"""A peer of the comparison: PyAirbyte running a declarative (low-code) source into its DuckDB cache.

    .venv/bin/python -m benchmarks.peer_airbyte --venv          # make (once) and print PyAirbyte's own venv
    AIRBYTE_VENV/bin/python -m benchmarks.peer_airbyte BASE_URL API_KEY DUCKDB_FILE [CONCURRENCY]

PyAirbyte (`airbyte`, pinned in AIRBYTE below) pins a DuckDB other than ours, so it runs from a venv of
its own, made on first use under ~/.cache/commops-bench/ (or $COMMOPS_AIRBYTE_VENV): never in the
project's venv, never in the repository. The source is benchmarks/peer_airbyte.yaml (the four lists,
archived KOLs as a second partition of `kols`, bearer auth, page numbers up to the last page the first
page's meta gives, `concurrency_level` from CONCURRENCY: the requests our sync and the bare loop keep in
flight). PyAirbyte runs it in-process (airbyte-cdk's ConcurrentDeclarativeSource) with
AIRBYTE_OFFLINE_MODE=1 (no registry, no telemetry) and loads every stream into a DuckDBCache at
DUCKDB_FILE (schema main, PyAirbyte's default write strategy: merge on the primary key). KOL details are not
fetched: the comparison runs our sync with details off.

The runner prints one JSON line: seconds (the read and load, imports excluded, as for our sync's child),
peak RSS (this process's VmHWM, and its children's, if any), rows per stream. This module imports only
the standard library at the top: it runs under both interpreters.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

AIRBYTE = "airbyte==0.71.3"
MANIFEST = Path(__file__).with_suffix(".yaml")
STREAMS = ("kols", "campaigns", "products", "signals")


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "commops-bench" / f"airbyte-{AIRBYTE.split('==')[1]}"
    return Path(os.environ.get("COMMOPS_AIRBYTE_VENV") or default)


def ensure_venv() -> Path:
    """PyAirbyte's own venv, made once (a few minutes: pip installs airbyte and its CDK); its python."""
    directory = venv_dir()
    python = directory / "bin" / "python"
    marker = directory / ".commops-installed"
    if marker.exists() and marker.read_text() == AIRBYTE:
        return python
    print(f"making PyAirbyte's venv at {directory} ({AIRBYTE}) ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True)
    out = subprocess.run([str(python), "-m", "pip", "install", "-q", AIRBYTE], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"pip install {AIRBYTE} into {directory} failed: {out.stderr.strip().splitlines()[-1:]}")
    marker.write_text(AIRBYTE)
    return python


def _peak_rss_mb() -> float:
    """VmHWM: this process's own high-water mark (benchmarks/memory.py says why not ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(base_url: str, api_key: str, duckdb_file: Path, concurrency: int) -> dict:
    os.environ["AIRBYTE_OFFLINE_MODE"] = "1"
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ.setdefault("AIRBYTE_LOGGING_ROOT", str(duckdb_file.parent / "logs"))
    import airbyte as ab
    from airbyte.caches import DuckDBCache

    started = time.perf_counter()
    import yaml

    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["concurrency_level"].update(default_concurrency=concurrency, max_concurrency=concurrency)
    source = ab.get_source("source-commops", source_manifest=manifest, streams="*",
                           config={"base_url": base_url.rstrip("/"), "api_key": api_key})
    cache = DuckDBCache(db_path=duckdb_file, schema_name="main", cache_dir=duckdb_file.parent / "cache-files")
    result = source.read(cache=cache)
    seconds = time.perf_counter() - started
    rows = {name: len(result[name]) for name in STREAMS}
    own = _peak_rss_mb()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mb": max(own, children), "own_rss_mb": own, "rows": rows,
            "config": {"airbyte": AIRBYTE, "concurrency": concurrency}}


def main() -> None:
    if sys.argv[1:] == ["--venv"]:
        print(ensure_venv())
        return
    base_url, api_key, duckdb_file = sys.argv[1:4]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    try:
        figures = run(base_url, api_key, Path(duckdb_file), concurrency)
    except Exception as error:  # PyAirbyte's errors span many lines: the page quotes the last stderr line
        cause = getattr(error, "original_exception", None) or error  # a connector's failure, wrapped
        print(f"\nPyAirbyte run failed: {type(error).__name__}: {' '.join(str(cause).split())[:400]}", file=sys.stderr)
        raise SystemExit(1) from None
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
