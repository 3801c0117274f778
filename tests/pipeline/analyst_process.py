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
conn = duckdb.connect(path, read_only=True)
held_count = conn.execute("SELECT count(*) FROM kols").fetchone()[0]
print("ready", flush=True)
queries, errors = 0, []
while not stop.exists():
    try:
        conn.execute("SELECT tier, count(*), max(updated_at) FROM kols GROUP BY tier").fetchall()
        conn.execute("SELECT count(*) FROM signal_product_relevance r JOIN products p ON p.id = r.product_id").fetchall()
        queries += 1
    except Exception as error:  # noqa: BLE001 - reported to the test
        errors.append(repr(error))
    time.sleep(0.01)
still_held = conn.execute("SELECT count(*) FROM kols").fetchone()[0]
conn.close()
fresh = duckdb.connect(path, read_only=True)
after_reconnect = fresh.execute("SELECT count(*) FROM kols").fetchone()[0]
fresh.close()
print(json.dumps({"queries": queries, "errors": errors, "held_count": held_count, "still_held": still_held,
                  "after_reconnect": after_reconnect}), flush=True)
