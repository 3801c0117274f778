"""A peer of the comparison: dlt 1.x's `rest_api` source loading the four lists into DuckDB, tuned.

    .venv/bin/python -m benchmarks.peer_dlt BASE_URL API_KEY DUCKDB_FILE PIPELINES_DIR [LOADER_FILE_FORMAT [plain]]

Configured as dlt's documentation recommends for a page-number API (RESTAPIConfig, BearerTokenAuth,
`page_number` paginator, `data_selector: data`, merge on `id`, per_page=100), then at its best:
- `parallelized=True` on every resource: the five lists are extracted side by side in dlt's thread pool;
- workers through dlt's own config variables (set here unless the environment sets them): extract
  threads as many as the requests our sync and the bare loop keep in flight (CONCURRENCY, I/O bound),
  normalize and load workers 2 (the machine's cores), and extract files rotated every 100,000 items so
  the two normalize processes have more than one file of a big list to share;
- the end of every list known from the first page, not from an empty page: the KOL list's meta has
  total_pages (`total_path`); the campaign, product and signal lists' meta has only `total` (items:
  spec 2.1), so their paginator counts pages from meta.total / meta.per_page (`PagesFromTotal`);
- LOADER_FILE_FORMAT parquet by default (`python -m benchmarks --dlt-format`), as dlt's DuckDB page
  suggests; `default` leaves dlt's own default for DuckDB (insert_values: SQL INSERT statements).
`plain` leaves out parallelized and the workers (dlt's defaults, as its docs configure rest_api), keeping
the paginators: the arm `python -m benchmarks --dlt-plain` measures beside the tuned one, since on a busy
2-core machine the tuning was not seen to pay (dlt's extract and normalize are CPU-bound here).
Archived KOLs are hidden from /kols unless is_archived=true, so a second resource reads them into
the same `kols` table, as our sync's second walk does. KOL details are not fetched: the comparison
runs our sync with details off, so dlt has no detail child resource either.

Prints one JSON line: seconds (the pipeline run, imports excluded, as for our sync's child), peak RSS
(this process and the normalize workers it forked), and the load info.
Needs the `bench` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time

from benchmarks.nightly_sync import CONCURRENCY

WORKERS = {
    "EXTRACT__WORKERS": str(CONCURRENCY),
    "NORMALIZE__WORKERS": "2",
    "LOAD__WORKERS": "2",
    "EXTRACT__DATA_WRITER__FILE_MAX_ITEMS": "100000",
}


def _pages_from_total():
    from dlt.sources.helpers.rest_client.paginators import PageNumberPaginator

    class PagesFromTotal(PageNumberPaginator):
        """Page numbers up to ceil(meta.total / meta.per_page): a list whose meta counts items, not pages."""

        def __init__(self) -> None:
            super().__init__(base_page=1, page_param="page", total_path="meta.total", stop_after_empty_page=False)

        def update_state(self, response, data=None) -> None:
            meta = response.json()["meta"]
            self.current_value += self.value_step
            if self.current_value > math.ceil(meta["total"] / meta["per_page"]):
                self._has_next_page = False

    return PagesFromTotal()


def config(base_url: str, api_key: str, parallelized: bool = True):
    from dlt.sources.helpers.rest_client.auth import BearerTokenAuth
    from dlt.sources.rest_api import RESTAPIConfig

    total_pages = {"type": "page_number", "base_page": 1, "page_param": "page", "total_path": "meta.total_pages",
                   "stop_after_empty_page": False}

    def resource_(name: str, paginator, params: dict | None = None, path: str | None = None) -> dict:
        return {
            "name": name,
            "table_name": path or name,
            "endpoint": {"path": path or name, "params": {"per_page": 100, **(params or {})}, "data_selector": "data",
                         "paginator": paginator},
        }

    api: RESTAPIConfig = {
        "client": {"base_url": base_url.rstrip("/") + "/", "auth": BearerTokenAuth(token=api_key)},
        "resource_defaults": {"primary_key": "id", "write_disposition": "merge", "parallelized": parallelized},
        "resources": [
            resource_("kols", total_pages),
            resource_("kols_archived", total_pages, {"is_archived": "true"}, path="kols"),
            resource_("campaigns", _pages_from_total()),
            resource_("products", _pages_from_total()),
            resource_("signals", _pages_from_total()),
        ],
    }
    return api


def main() -> None:
    base_url, api_key, duckdb_file, pipelines_dir = sys.argv[1:5]
    file_format = sys.argv[5] if len(sys.argv) > 5 else "parquet"
    tuned = sys.argv[6:7] != ["plain"]
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    for name, value in WORKERS.items() if tuned else ():
        os.environ.setdefault(name, value)
    import dlt
    from dlt.sources.rest_api import rest_api_source

    from benchmarks.memory import own_peak_rss_mb

    started = time.perf_counter()
    pipeline = dlt.pipeline(pipeline_name="commops_bench", pipelines_dir=pipelines_dir,
                            destination=dlt.destinations.duckdb(credentials=duckdb_file), dataset_name="commops")
    info = pipeline.run(rest_api_source(config(base_url, api_key, parallelized=tuned)),
                        loader_file_format=None if file_format == "default" else file_format)
    seconds = time.perf_counter() - started
    own = own_peak_rss_mb()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # forked workers: their own peaks
    print(json.dumps({"seconds": seconds, "peak_rss_mb": max(own, workers), "own_rss_mb": own,
                      "worker_rss_mb": workers, "has_failed_jobs": info.has_failed_jobs,
                      "config": {k: os.environ.get(k, "dlt's default") for k in WORKERS}
                      | {"loader_file_format": file_format, "parallelized": tuned}}))


if __name__ == "__main__":
    main()
