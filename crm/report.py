"""Per-run reconciliation reports: a CSV of every row (Excel-friendly: UTF-8 with BOM, CRLF,
differences and reasons as readable text, no cell a spreadsheet would run as a formula:
spreadsheet_csv), a merge CSV of the duplicate sets, and a self-contained HTML page (inline CSS,
JS and SVG, no network) that a CRM admin can act on: the counts, the trend of past runs, for each
status one line saying what to do and its first rows, the probable matches with both records side
by side and the reasons, the duplicate sets, and the write-back plan (what --apply would create and
update, and whom it leaves for review). Contact ids link to the record in Salesforce (Lightning:
<instance>/lightning/r/Contact/<Id>/view) when the CRM is Salesforce. latest.* are copies of the
newest. Also the markdown summary Dagster shows.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC
from pathlib import Path
from typing import Any

import duckdb
import jinja2
from markupsafe import Markup, escape

from crm import duplicates, spreadsheet_csv, writeback
from crm.reconcile import DEFAULT_RULES
from crm.tables import RESULT_TABLE, RUNS_TABLE, STATUSES

HTML_ROWS_PER_STATUS = 500
# Sections of the page: what needs a person first, the agreeing pairs last.
PROBLEMS_FIRST = ("probable_match", "conflict", "missing_in_crm", "duplicate_in_crm", "id_conflict", "orphan_in_crm",
                  "no_email", "duplicate_in_kols", "crm_only", "matched")
# What an admin does with each status, in one line (docs/crm.md says more).
ACTIONS = {
    "probable_match": "Compare the two records: if they are one person, `commops reconcile confirm KOL CONTACT` links "
                      "them; if not, `commops reconcile reject KOL CONTACT` and the pair is never proposed again. "
                      "Write-back creates no contact for these KOLs until then.",
    "conflict": "Fix the contact in Salesforce, or let `commops reconcile --apply` update the fields the KOL record owns.",
    "missing_in_crm": "Create the contact, or let `--apply` create it; KOLs marked 'needs review' first need a look "
                      "at their candidates.",
    "duplicate_in_crm": "Several contacts share the KOL's email: merge them (the merge CSV suggests a master).",
    "id_conflict": "The email points at one KOL, the external id at another: decide which is right and fix the contact.",
    "orphan_in_crm": "The external id names no active KOL: clear or correct it.",
    "no_email": "Add the email to the KOL record; the candidates are contacts that may be the KOL.",
    "duplicate_in_kols": "Two KOLs share an email: fix the KOL records (the smallest id is the one reconciled).",
    "crm_only": "Nothing, unless the contact should be a KOL.",
    "matched": "Nothing: the contact agrees with the KOL record.",
}
TREND_RUNS = 30
CSV_COLUMNS = (
    "status", "kol_id", "kol_primary", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email",
    "kol_name", "crm_name", "institution", "differences", "candidates", "note", "match_score", "match_reasons",
    "needs_review", "duplicate_set_id", "suggested_master", "master_reason",
)
_DIFF_TYPE = """'[{"field":"VARCHAR","kol_value":"VARCHAR","crm_value":"VARCHAR"}]'"""
_CAND_TYPE = """'[{"crm_id":"VARCHAR","name":"VARCHAR","score":"DOUBLE"}]'"""
_REASON_TYPE = """'[{"field":"VARCHAR","level":"VARCHAR","bits":"DOUBLE"}]'"""
CSV_SELECT = f"""
SELECT status, kol_id, kol_primary, crm_id, external_id, email_normalized, kol_email, crm_email, kol_name, crm_name,
       institution,
       array_to_string(list_transform(from_json(differences, {_DIFF_TYPE}),
           lambda d: d.field || ': "' || coalesce(d.kol_value, '') || '" ≠ "' || coalesce(d.crm_value, '') || '"'), '; ')
           AS differences,
       array_to_string(list_transform(from_json(candidates, {_CAND_TYPE}),
           lambda c: c.name || ' (' || c.crm_id || ', ' || c.score || ')'), '; ') AS candidates,
       note, match_score,
       array_to_string(list_transform(from_json(match_reasons, {_REASON_TYPE}),
           lambda r: r.field || ' ' || r.level || ' (' || r.bits || ' bits)'), '; ') AS match_reasons,
       needs_review, duplicate_set_id, suggested_master, master_reason
FROM {RESULT_TABLE} ORDER BY status, kol_id NULLS LAST, crm_id"""


def run_stamp(run: dict[str, Any]) -> str:
    """A file-name part that sorts by time and names the run: 2026-11-23T0408Z-64ce5f3a."""
    short_id = "".join(ch for ch in str(run["run_id"]) if ch.isalnum())[:8]
    return f"{run['reconciled_at'].astimezone(UTC):%Y-%m-%dT%H%MZ}-{short_id}"


def write_csv(conn: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Every row of the latest result, streamed in batches; returns the row count."""
    return spreadsheet_csv.write(conn, CSV_SELECT, CSV_COLUMNS, path)


def _trend_svg(runs: list[dict[str, Any]]) -> str:
    """Inline SVG: one line per status over the runs (oldest left)."""
    width, height, pad = 900, 220, 36
    colours = dict(zip(STATUSES, ("#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0", "#5d4037",
                                  "#00838f", "#ad1457", "#757575", "#f9a825")))
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
    for n, status in enumerate(STATUSES):
        x = pad + (n % 5) * 170
        y = height + 8 + (n // 5) * 14 - 14
        parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colours[status]}"/>'
                     f'<text x="{x + 14}" y="{y + 9}" font-size="11">{status}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rows(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _sections(conn: duckdb.DuckDBPyConnection, counts: dict[str, int], limit: int) -> list[dict[str, Any]]:
    sections = []
    for status in PROBLEMS_FIRST:
        if not counts.get(status):
            continue
        rows = _rows(conn, f"""
SELECT kol_id, kol_primary, crm_id, coalesce(kol_email, crm_email) AS email, kol_email, crm_email, kol_name, crm_name,
       institution, differences::VARCHAR AS differences, candidates::VARCHAR AS candidates, note, match_score,
       match_reasons::VARCHAR AS match_reasons, needs_review
FROM {RESULT_TABLE} WHERE status = ? ORDER BY {"match_score DESC, " if status == "probable_match" else ""}kol_id NULLS LAST, crm_id
LIMIT {int(limit)}""", [status])
        for row in rows:
            for key in ("differences", "candidates", "match_reasons"):
                row[key] = json.loads(row[key]) if row[key] else None
        action = Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(ACTIONS[status]))))
        sections.append({"status": status, "action": action, "rows": rows, "total": counts[status],
                         "truncated": counts[status] > len(rows)})
    return sections


def _duplicate_sets(conn: duckdb.DuckDBPyConnection, limit: int) -> dict[str, Any]:
    rows = _rows(conn, f"""
SELECT duplicate_set_id, suggested_master, master_reason,
       list({{'crm_id': crm_id, 'name': crm_name, 'email': crm_email, 'status': status}} ORDER BY crm_id) AS members
FROM {RESULT_TABLE} WHERE duplicate_set_id IS NOT NULL
GROUP BY ALL ORDER BY duplicate_set_id""")
    return {"total": len(rows), "rows": rows[:limit], "truncated": len(rows) > limit}


def _plan(conn: duckdb.DuckDBPyConnection, limit: int) -> dict[str, Any]:
    """What `--apply` would do with this result: creates, updates, and the KOLs left for review."""
    plan = writeback.plan_writeback(conn, DEFAULT_RULES).to_pylist()
    creates: dict[str, dict[str, Any]] = {}
    updates: list[dict[str, Any]] = []
    for row in plan:
        if row["action"] == "create":
            creates.setdefault(row["kol_id"], {"kol_id": row["kol_id"]})[row["field"]] = row["new_value"]
        else:
            updates.append(row)
    review = [{"kol_id": k, "crm_id": c, "score": s} for k, c, s in writeback.needs_review(conn)]
    return {"creates": list(creates.values())[:limit], "create_total": len(creates), "updates": updates[:limit],
            "update_total": len(updates), "update_records": len({row["crm_id"] for row in updates}),
            "review": review[:limit], "review_total": len(review)}


def _runs(conn: duckdb.DuckDBPyConnection, limit: int) -> list[dict[str, Any]]:
    return _rows(conn, f"SELECT * FROM (SELECT * FROM {RUNS_TABLE} ORDER BY reconciled_at DESC LIMIT {int(limit)}) "
                       "ORDER BY reconciled_at")


def write_reports(
    conn: duckdb.DuckDBPyConnection, directory: Path | str, rows_per_status: int = HTML_ROWS_PER_STATUS,
    writable: bool = True, record_base_url: str | None = None,
) -> tuple[Path, Path]:
    """reconciliation-<run>.csv/.html and -merge.csv (and latest.*) for the latest run in `directory`;
    records the CSV and HTML paths on the run's reconciliation_runs row. Returns (csv, html).
    `writable`: the CRM takes write-back (Salesforce); `record_base_url`: links contact ids to Salesforce."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    runs = _runs(conn, TREND_RUNS)
    run = runs[-1]
    stamp = run_stamp(run)
    csv_path, html_path = directory / f"reconciliation-{stamp}.csv", directory / f"reconciliation-{stamp}.html"
    merge_path = directory / f"reconciliation-{stamp}-merge.csv"
    write_csv(conn, csv_path)
    merges = duplicates.write_merge_csv(conn, RESULT_TABLE, merge_path)
    counts = {status: int(run[status] or 0) for status in STATUSES}
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("crm", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    html = environment.get_template("reconciliation.html.j2").render(
        run=run, counts=list(counts.items()), sections=_sections(conn, counts, rows_per_status),
        trend={"runs": len(runs), "svg": _trend_svg(runs) if len(runs) > 1 else None}, csv_name=csv_path.name,
        merge_name=merge_path.name, merges=merges, duplicate_sets=_duplicate_sets(conn, rows_per_status),
        plan=_plan(conn, rows_per_status), writable=writable,
        record_url=(record_base_url.rstrip("/") + "/lightning/r/Contact/{}/view") if record_base_url else None,
    )
    html_path.write_text(html, encoding="utf-8")
    for path, latest in ((csv_path, "latest.csv"), (html_path, "latest.html"), (merge_path, "latest-merge.csv")):
        shutil.copyfile(path, directory / latest)
    conn.execute(f"UPDATE {RUNS_TABLE} SET report_csv = ?, report_html = ? WHERE run_id = ?",
                 [str(csv_path), str(html_path), run["run_id"]])
    return csv_path, html_path


def markdown_summary(conn: duckdb.DuckDBPyConnection) -> str:
    """Counts of the latest run as a markdown table (Dagster materialization preview)."""
    run = _runs(conn, 1)[-1]
    lines = [f"**CRM reconciliation {run['run_id']}**: {run['kols']} KOLs, {run['contacts']} contacts, "
             f"{(run['duration_seconds'] or 0):.1f} s", "", "| status | rows |", "|---|---:|"]
    lines += [f"| {status} | {run[status] or 0} |" for status in STATUSES]
    lines += ["", f"KOLs needing review: {run.get('needs_review') or 0}; duplicate sets in the CRM: "
                  f"{run.get('duplicate_sets') or 0}"]
    if run.get("report_html"):
        lines += ["", f"Report: `{run['report_html']}`"]
    return "\n".join(lines)
