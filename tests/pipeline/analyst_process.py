"""An analyst: holds analytics.duckdb open read-only and queries it in a loop until told to stop.

Usage: python analyst_process.py <analytics.duckdb> <stop-file>
Prints "ready", then on stop one JSON line: queries run, errors met, the count of kols seen on
the held connection, and the count seen after reconnecting.
"""

import json
import sys
import time
from pathlib import Path

import duckdb

path, stop = sys.argv[1], Path(sys.argv[2])


def connect() -> duckdb.DuckDBPyConnection:
    """As docs/analysts.md says: read-only, the lake's relative paths resolved in the data directory."""
    return duckdb.connect(path, read_only=True, config={"file_search_path": str(Path(path).parent)})


conn = connect()
held_count = conn.execute("SELECT count(*) FROM kols").fetchone()[0]
print("ready", flush=True)
queries, errors = 0, []
while not stop.exists():
    try:
        conn.execute("SELECT tier, count(*), max(updated_at) FROM kols GROUP BY tier").fetchall()
        conn.execute("SELECT count(*) FROM signal_product_relevance r JOIN products p ON p.id = r.product_id").fetchall()
        conn.execute("SELECT snapshot_date, count(*) FROM kols_history GROUP BY 1").fetchall()
        queries += 1
    except Exception as error:  # noqa: BLE001 - reported to the test
        errors.append(repr(error))
    time.sleep(0.01)
still_held = conn.execute("SELECT count(*) FROM kols").fetchone()[0]
conn.close()
fresh = connect()
after_reconnect = fresh.execute("SELECT count(*) FROM kols").fetchone()[0]
fresh.close()
print(json.dumps({"queries": queries, "errors": errors, "held_count": held_count, "still_held": still_held,
                  "after_reconnect": after_reconnect}), flush=True)
