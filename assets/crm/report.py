"""Per-run reconciliation reports: a CSV of every row (Excel-friendly: UTF-8 with BOM, CRLF,
differences as readable text) and a self-contained HTML page (inline CSS, JS and SVG, no
network) with the counts, a trend of past runs, the first rows of each status and a search box;
latest.csv / latest.html are copies of the newest. Also the markdown summary Dagster shows.
"""

from __future__ import annotations

import csv
import json
import shutil
from datetime import UTC
from pathlib import Path
from typing import Any

import duckdb
import jinja2

from assets.crm.tables import RESULT_TABLE, RUNS_TABLE, STATUSES

HTML_ROWS_PER_STATUS = 500
# Sections of the page: what needs a person first, the agreeing pairs last.
PROBLEMS_FIRST = ("conflict", "missing_in_crm", "duplicate_in_crm", "id_conflict", "orphan_in_crm", "no_email",
                  "duplicate_in_kols", "crm_only", "matched")
TREND_RUNS = 30
CSV_COLUMNS = (
    "status", "kol_id", "kol_primary", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email",
    "kol_name", "crm_name", "institution", "differences", "candidates", "note",
)
_DIFF_TYPE = """'[{"field":"VARCHAR","kol_value":"VARCHAR","crm_value":"VARCHAR"}]'"""
_CAND_TYPE = """'[{"crm_id":"VARCHAR","name":"VARCHAR","score":"DOUBLE"}]'"""
CSV_SELECT = f"""
SELECT status, kol_id, kol_primary, crm_id, external_id, email_normalized, kol_email, crm_email, kol_name, crm_name,
       institution,
       array_to_string(list_transform(from_json(differences, {_DIFF_TYPE}),
           lambda d: d.field || ': "' || coalesce(d.kol_value, '') || '" ≠ "' || coalesce(d.crm_value, '') || '"'), '; ')
           AS differences,
       array_to_string(list_transform(from_json(candidates, {_CAND_TYPE}),
           lambda c: c.name || ' (' || c.crm_id || ', ' || c.score || ')'), '; ') AS candidates,
       note
FROM {RESULT_TABLE} ORDER BY status, kol_id NULLS LAST, crm_id"""


def run_stamp(run: dict[str, Any]) -> str:
    """A file-name part that sorts by time and names the run: 2026-11-23T0408Z-64ce5f3a."""
    short_id = "".join(ch for ch in str(run["run_id"]) if ch.isalnum())[:8]
    return f"{run['reconciled_at'].astimezone(UTC):%Y-%m-%dT%H%MZ}-{short_id}"


def write_csv(conn: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Every row of the latest result, streamed in batches; returns the row count."""
    cursor = conn.cursor()
    cursor.execute(CSV_SELECT)
    count = 0
    with path.open("w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(CSV_COLUMNS)
        while batch := cursor.fetchmany(10_000):
            writer.writerows(batch)
            count += len(batch)
    return count


def _trend_svg(runs: list[dict[str, Any]]) -> str:
    """Inline SVG: one line per status over the runs (oldest left)."""
    width, height, pad = 900, 220, 36
    colours = dict(zip(STATUSES, ("#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0", "#5d4037",
                                  "#00838f", "#ad1457", "#757575")))
    top = max([run[s] or 0 for run in runs for s in STATUSES] + [1])
    step = (width - 2 * pad) / max(len(runs) - 1, 1)
    parts = [f'<svg id="trend" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
             f'viewBox="0 0 {width} {height + 30}" role="img" aria-label="counts per status over runs">',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>',
             f'<text x="4" y="{pad}" font-size="11">{top}</text><text x="4" y="{height - pad}" font-size="11">0</text>']
    for status in STATUSES:
        points = " ".join(
            f"{pad + i * step:.1f},{height - pad - (run[status] or 0) / top * (height - 2 * pad):.1f}"
            for i, run in enumerate(runs)
        )
        parts.append(f'<polyline data-status="{status}" fill="none" stroke="{colours[status]}" stroke-width="2" points="{points}"/>')
        parts.extend(f'<circle cx="{point.split(",")[0]}" cy="{point.split(",")[1]}" r="3" fill="{colours[status]}"/>'
                     for point in points.split())  # a single run is a dot, not an empty chart
    for n, status in enumerate(STATUSES):
        x = pad + n * 110
        parts.append(f'<rect x="{x}" y="{height + 8}" width="10" height="10" fill="{colours[status]}"/>'
                     f'<text x="{x + 14}" y="{height + 17}" font-size="11">{status}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _sections(conn: duckdb.DuckDBPyConnection, counts: dict[str, int], limit: int) -> list[dict[str, Any]]:
    sections = []
    for status in PROBLEMS_FIRST:
        if not counts.get(status):
            continue
        rows = conn.execute(
            f"SELECT kol_id, kol_primary, crm_id, coalesce(kol_email, crm_email) AS email, kol_name, crm_name, institution, "
            f"differences::VARCHAR, candidates::VARCHAR, note FROM {RESULT_TABLE} WHERE status = ? "
            f"ORDER BY kol_id NULLS LAST, crm_id LIMIT {int(limit)}",
            [status],
        ).fetchall()
        names = ("kol_id", "kol_primary", "crm_id", "email", "kol_name", "crm_name", "institution", "differences",
                 "candidates", "note")
        dicts = [dict(zip(names, row)) for row in rows]
        for row in dicts:
            row["differences"] = json.loads(row["differences"]) if row["differences"] else None
            row["candidates"] = json.loads(row["candidates"]) if row["candidates"] else None
        sections.append({"status": status, "rows": dicts, "total": counts[status], "truncated": counts[status] > len(dicts)})
    return sections


def _runs(conn: duckdb.DuckDBPyConnection, limit: int) -> list[dict[str, Any]]:
    cursor = conn.execute(f"SELECT * FROM (SELECT * FROM {RUNS_TABLE} ORDER BY reconciled_at DESC LIMIT {int(limit)}) "
                          "ORDER BY reconciled_at")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def write_reports(
    conn: duckdb.DuckDBPyConnection, directory: Path | str, rows_per_status: int = HTML_ROWS_PER_STATUS
) -> tuple[Path, Path]:
    """reconciliation-<run>.csv/.html (and latest.csv/.html) for the latest run in `directory`;
    records their paths on the run's reconciliation_runs row. Returns (csv, html)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    runs = _runs(conn, TREND_RUNS)
    run = runs[-1]
    stamp = run_stamp(run)
    csv_path, html_path = directory / f"reconciliation-{stamp}.csv", directory / f"reconciliation-{stamp}.html"
    write_csv(conn, csv_path)
    counts = {status: int(run[status] or 0) for status in STATUSES}
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("assets.crm", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    html = environment.get_template("reconciliation.html.j2").render(
        run=run, counts=list(counts.items()), sections=_sections(conn, counts, rows_per_status),
        trend={"runs": len(runs), "svg": _trend_svg(runs)}, csv_name=csv_path.name,
    )
    html_path.write_text(html, encoding="utf-8")
    shutil.copyfile(csv_path, directory / "latest.csv")
    shutil.copyfile(html_path, directory / "latest.html")
    conn.execute(f"UPDATE {RUNS_TABLE} SET report_csv = ?, report_html = ? WHERE run_id = ?",
                 [str(csv_path), str(html_path), run["run_id"]])
    return csv_path, html_path


def markdown_summary(conn: duckdb.DuckDBPyConnection) -> str:
    """Counts of the latest run as a markdown table (Dagster materialization preview)."""
    run = _runs(conn, 1)[-1]
    lines = [f"**CRM reconciliation {run['run_id']}**: {run['kols']} KOLs, {run['contacts']} contacts, "
             f"{(run['duration_seconds'] or 0):.1f} s", "", "| status | rows |", "|---|---:|"]
    lines += [f"| {status} | {run[status] or 0} |" for status in STATUSES]
    if run.get("report_html"):
        lines += ["", f"Report: `{run['report_html']}`"]
    return "\n".join(lines)
