"""An analyst on another machine, as docs/analysts.md shows it: pyiceberg loads the Iceberg tables from the
SQL catalog, hands them to DuckDB as Arrow. Run in its own process by the tests:

    python -m tests.pipeline.iceberg_reader OUT.duckdb TABLE...

copies each table's current snapshot into the DuckDB file OUT (the test compares it with analytics.duckdb).
Catalog and warehouse come from COMMOPS_ICEBERG_CATALOG_URL and COMMOPS_ICEBERG_WAREHOUSE, the object
store's endpoint and credentials from the AWS variables; none of the pipeline's code is imported.
"""

from __future__ import annotations

import os
import sys

import duckdb
from pyiceberg.catalog import load_catalog


def main(out: str, tables: list[str]) -> None:
    properties = {
        "type": "sql",
        "uri": os.environ["COMMOPS_ICEBERG_CATALOG_URL"],
        "warehouse": os.environ["COMMOPS_ICEBERG_WAREHOUSE"],
        "s3.endpoint": os.environ["AWS_ENDPOINT_URL"],
        "s3.region": os.environ["AWS_REGION"],
        "s3.request-timeout": "60",  # the SDK's default (3 s without a byte) is short for a loaded test server
    }
    catalog = load_catalog("commops", **properties)
    conn = duckdb.connect(out)
    for name in tables:
        arrow = catalog.load_table(f"commops.{name}").scan().to_arrow()
        conn.register("snapshot", arrow)
        conn.execute(f"CREATE TABLE {name} AS SELECT * FROM snapshot")
        conn.unregister("snapshot")
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
