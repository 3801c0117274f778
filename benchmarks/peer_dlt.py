"""The peer of the comparison: dlt 1.x's `rest_api` source loading the four lists into DuckDB.

    .venv/bin/python -m benchmarks.peer_dlt BASE_URL API_KEY DUCKDB_FILE PIPELINES_DIR [LOADER_FILE_FORMAT]

Configured as dlt's documentation recommends for a page-number API (RESTAPIConfig, BearerTokenAuth,
`page_number` paginator, `data_selector: data`, merge on `id`), with per_page=100 as a param and no
other tuning (dlt's default workers, retries and buffers). Only the KOL list's meta carries
total_pages; the other three lists stop after the first empty page (one extra request each).
Archived KOLs are hidden from /kols unless is_archived=true, so a second resource reads them into
the same `kols` table, as our sync's second walk does. Prints one JSON line: seconds (the pipeline
run, imports excluded, as for our sync's child), peak RSS (this process and any workers it started),
and the load info. LOADER_FILE_FORMAT (e.g. parquet) is passed to pipeline.run; without it dlt uses
its default for DuckDB (insert_values: SQL INSERT statements, whose load dominates the time and memory).
Needs the `bench` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def config(base_url: str, api_key: str):
    from dlt.sources.helpers.rest_client.auth import BearerTokenAuth
    from dlt.sources.rest_api import RESTAPIConfig

    def pages(total_path: str | None) -> dict:
        paginator = {"type": "page_number", "base_page": 1, "page_param": "page", "total_path": total_path}
        if total_path is None:
            paginator["stop_after_empty_page"] = True
        return paginator

    def resource_(name: str, path: str, paginator: dict, params: dict | None = None, table: str | None = None) -> dict:
        return {
            "name": name,
            "table_name": table or name,
            "primary_key": "id",
            "write_disposition": "merge",
            "endpoint": {"path": path, "params": {"per_page": 100, **(params or {})}, "data_selector": "data",
                         "paginator": paginator},
        }

    api: RESTAPIConfig = {
        "client": {"base_url": base_url.rstrip("/") + "/", "auth": BearerTokenAuth(token=api_key)},
        "resources": [
            resource_("kols", "kols", pages("meta.total_pages")),
            resource_("kols_archived", "kols", pages("meta.total_pages"), {"is_archived": "true"}, table="kols"),
            resource_("campaigns", "campaigns", pages(None)),
            resource_("products", "products", pages(None)),
            resource_("signals", "signals", pages(None)),
        ],
    }
    return api


def main() -> None:
    base_url, api_key, duckdb_file, pipelines_dir = sys.argv[1:5]
    file_format = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "default" else None
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    import dlt
    from dlt.sources.rest_api import rest_api_source

    from benchmarks.memory import own_peak_rss_mb

    started = time.perf_counter()
    pipeline = dlt.pipeline(pipeline_name="commops_bench", pipelines_dir=pipelines_dir,
                            destination=dlt.destinations.duckdb(credentials=duckdb_file), dataset_name="commops")
    info = pipeline.run(rest_api_source(config(base_url, api_key)), loader_file_format=file_format)
    seconds = time.perf_counter() - started
    own = own_peak_rss_mb()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # forked workers: their own peaks
    print(json.dumps({"seconds": seconds, "peak_rss_mb": max(own, workers), "own_rss_mb": own,
                      "worker_rss_mb": workers, "has_failed_jobs": info.has_failed_jobs}))


if __name__ == "__main__":
    main()
