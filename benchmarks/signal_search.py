"""Benchmark: full-scan signal search before folding, with a full folded copy, and as it is now.

    .venv/bin/python benchmarks/signal_search.py [--signals 100000] [--rounds 9]

Seeds --signals signals (and the 500 products they relate to) with the seed generator, then
copies the signals table three times, each into a database file of its own with the schema's
signal indexes:
  before  no search_text: a search is title LIKE %term% OR content LIKE %term% (folds A-Z only)
  copy    search_text holds every row's folded title and content, matched with instr()
          (the folding change, 1.43x slower on a full scan)
  now     as the service writes it: search_text empty where folding changes only A-Z, and
          the clause of service/store/search.py
Each round runs, for every layout in turn (in reverse order every other round), the two
statements of a signal list with a search (listing.count and listing.page_rows: the number of
matches, the newest 100). Prints per term the medians over the rounds and the ratios to
`before`, then each layout's file size.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.local import create_local_service  # noqa: E402
from service.store import db, search  # noqa: E402

LAYOUTS = ("before", "copy", "now")
# a term found nowhere (every row read, the regression's case), a frequent one, a non-ASCII one in capitals
TERMS = ("qqzzxx", "recall", "ZÜRICH")


def main() -> None:
    args = _parse_args()
    with tempfile.TemporaryDirectory(prefix="commops-signal-search-") as workdir:
        directory = Path(workdir)
        started = time.perf_counter()
        local = create_local_service(directory / "service.db", org_name="Benchmark Medical", products=500,
                                     signals=args.signals, random_seed=args.random_seed)
        print(f"seeded {args.signals:,} signals in {time.perf_counter() - started:.1f} s")
        paths = _layouts(local.db_path, directory)
        conns = {layout: db.connect(path) for layout, path in paths.items()}
        copies = conns["now"].execute("SELECT count(*) FROM signals WHERE search_text != ''").fetchone()[0]
        print(f"now: {copies:,} of {args.signals:,} signals keep a folded copy")
        try:
            for term in TERMS:
                medians, matches = _measure(conns, local.org_id, term, args.rounds)
                ratios = ", ".join(f"{layout} / before {medians[layout] / medians['before']:.2f}"
                                   for layout in LAYOUTS[1:])
                print(f"search={term} ({matches:,} matches), median of {args.rounds}: "
                      + ", ".join(f"{layout} {medians[layout]:.1f} ms" for layout in LAYOUTS) + f"; {ratios}")
        finally:
            for conn in conns.values():
                conn.close()
        print("file size: " + ", ".join(f"{layout} {path.stat().st_size / 2**20:.0f} MB"
                                        for layout, path in paths.items()))


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9, help="times each layout answers each term (medians)")
    parser.add_argument("--random-seed", type=int, default=0)
    return parser.parse_args()


def _layouts(seeded: Path, directory: Path) -> dict[str, Path]:
    """The seeded signals table in the three layouts, one file each (so their sizes compare)."""
    conn = db.connect(seeded)
    conn.execute("PRAGMA foreign_keys = OFF")  # the copies hold no organizations table
    table = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'signals'").fetchone()[0]
    indexes = [r[0] for r in conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'signals' AND sql IS NOT NULL")]
    columns = [r[1] for r in conn.execute("PRAGMA table_info(signals)") if r[1] != "search_text"]
    conn.create_function("full_copy", 2, lambda title, content: search.SEPARATOR.join(
        search.fold(value) if value else "" for value in (title, content)), deterministic=True)
    selects = {
        "before": f"SELECT {', '.join(columns)} FROM main.signals ORDER BY rowid",
        "copy": f"SELECT {', '.join(columns)}, full_copy(title, content) FROM main.signals ORDER BY rowid",
        "now": f"SELECT {', '.join(columns)}, search_text FROM main.signals ORDER BY rowid",
    }
    paths = {}
    for layout, select in selects.items():
        paths[layout], alias = directory / f"{layout}.db", f"layout_{layout}"
        conn.execute(f"ATTACH ? AS {alias}", (str(paths[layout]),))
        schema = table if layout != "before" else re.sub(r",\s*search_text[^\n]*", "", table)
        conn.execute(schema.replace("CREATE TABLE signals", f"CREATE TABLE {alias}.signals", 1))
        for index in indexes:
            conn.execute(index.replace("INDEX ", f"INDEX {alias}.", 1))
        with db.transaction(conn):
            conn.execute(f"INSERT INTO {alias}.signals {select}")
        conn.execute(f"DETACH {alias}")
    conn.close()
    return paths


def _clause(layout: str, term: str) -> tuple[str, list[str]]:
    if layout == "now":
        return search.condition("signals", term)
    if layout == "copy":
        return "instr(search_text, ?) > 0", [search.fold(term)]
    pattern = "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return "(title LIKE ? ESCAPE '\\' OR content LIKE ? ESCAPE '\\')", [pattern, pattern]


def _measure(conns: dict, org_id: str, term: str, rounds: int) -> tuple[dict[str, float], int]:
    """Median ms per layout of counting the matches and reading the first page; the matches."""
    samples: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    matches = {}
    for round_number in range(rounds):
        for layout in LAYOUTS if round_number % 2 == 0 else LAYOUTS[::-1]:  # no layout always runs first
            clause, params = _clause(layout, term)
            where, values = f"org_id = ? AND {clause}", [org_id, *params]
            started = time.perf_counter()
            matches[layout] = conns[layout].execute(f"SELECT count(*) FROM signals WHERE {where}", values).fetchone()[0]
            conns[layout].execute(
                f"SELECT * FROM signals WHERE rowid IN (SELECT rowid FROM signals WHERE {where} "
                "ORDER BY published_at DESC, id DESC LIMIT 100) ORDER BY published_at DESC, id DESC", values).fetchall()
            samples[layout].append((time.perf_counter() - started) * 1000)
    if matches["copy"] != matches["now"] or (term.isascii() and matches["before"] != matches["now"]):
        raise SystemExit(f"search={term}: the layouts disagree: {matches}")  # before folds A-Z only
    return {layout: statistics.median(values) for layout, values in samples.items()}, matches["now"]


if __name__ == "__main__":
    main()
