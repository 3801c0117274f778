"""Per-run reconciliation reports: a CSV of every row (Excel-friendly: UTF-8 with BOM, CRLF,
differences and reasons as readable text, no cell a spreadsheet would run as a formula:
spreadsheet_csv), a merge CSV of the duplicate sets, and a self-contained HTML page (inline CSS,
JS and SVG, no network) that a CRM admin can act on: the counts, the trend of past runs, for each
status one line saying what to do and its first rows, the probable matches with both records side
by side and the reasons, the duplicate sets, and the write-back plan (what --apply would create and
update, and whom it leaves for review). Contact ids link to the record in Salesforce (Lightning:
<instance>/lightning/r/Contact/<Id>/view) when the CRM is Salesforce. latest.* are the newest, each put in place
by a rename (a download that began before reads the file it began whole). Also the markdown summary Dagster shows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import jinja2
from markupsafe import Markup, escape

from crm import duplicates, spliced_csv, spreadsheet_csv, writeback
from crm.tables import DEFAULT_ORG, MASTERS_TABLE, PLAN_TABLE, RESULT_TABLE, RUNS_TABLE, STATUSES
from resources import sql
from resources.files import link_over, remove_abandoned, replacing
from resources.sql import sql_literal

HTML_ROWS_PER_STATUS = 500
REPORTS_DIR = Path("reports") / "reconciliation"
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
    "decision", "status", "kol_id", "kol_primary", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email",
    "kol_name", "crm_name", "institution", "differences", "candidates", "note", "match_score", "match_reasons",
    "needs_review", "duplicate_set_id", "suggested_master", "master_reason",
)
_DIFF_TYPE = """'[{"field":"VARCHAR","kol_value":"VARCHAR","crm_value":"VARCHAR"}]'"""
_CAND_TYPE = """'[{"crm_id":"VARCHAR","name":"VARCHAR","score":"DOUBLE"}]'"""
_REASON_TYPE = """'[{"field":"VARCHAR","level":"VARCHAR","bits":"DOUBLE"}]'"""
_DIFFERENCES = ("array_to_string(list_transform(from_json(__COLUMN__, " + _DIFF_TYPE + "), lambda d: d.field || ': \"' "
                "|| coalesce(d.kol_value, '') || '\" ≠ \"' || coalesce(d.crm_value, '') || '\"'), '; ')")
CSV_SELECT = f"""NULL AS decision, status, kol_id, kol_primary, crm_id, external_id, email_normalized, kol_email, crm_email,
       kol_name, crm_name, institution, {_DIFFERENCES.replace("__COLUMN__", "differences")} AS differences,
       array_to_string(list_transform(from_json(candidates, {_CAND_TYPE}),
           lambda c: c.name || ' (' || c.crm_id || ', ' || c.score || ')'), '; ') AS candidates,
       note, match_score,
       array_to_string(list_transform(from_json(match_reasons, {_REASON_TYPE}),
           lambda r: r.field || ' ' || r.level || ' (' || r.bits || ' bits)'), '; ') AS match_reasons,
       needs_review, duplicate_set_id, suggested_master, master_reason,
       {_DIFFERENCES.replace("__COLUMN__", "differences_not_written")} AS differences_not_written"""
# The columns CSV_SELECT reads: a row whose values of these are unchanged has the same line.
CSV_READS = ("status", "kol_id", "kol_primary", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email",
             "kol_name", "crm_name", "institution", "differences", "candidates", "note", "match_score", "match_reasons",
             "needs_review", "duplicate_set_id", "suggested_master", "master_reason", "differences_not_written")
CSV_ORDER = f"list_position({list(PROBLEMS_FIRST)!r}, status), kol_id NULLS LAST, crm_id"
CSV_COLUMNS = (*CSV_COLUMNS, "differences_not_written")
PLAN_COLUMNS = ("decision", "plan_key", "action", "kol_id", "crm_id", "field", "old_value", "new_value", "kol_name",
                "institution")


def reports_dir(data_dir: str | Path, org: str) -> Path:
    """Where an organization's reports go: reports/reconciliation/, and <org>/ below it for any but `default`."""
    base = Path(data_dir) / REPORTS_DIR
    return base if org == DEFAULT_ORG else base / org


def run_stamp(run: dict[str, Any]) -> str:
    """A file-name part that sorts by time and names the run: 2026-11-23T0408Z-64ce5f3a."""
    short_id = "".join(ch for ch in str(run["run_id"]) if ch.isalnum())[:8]
    return f"{run['reconciled_at'].astimezone(UTC):%Y-%m-%dT%H%MZ}-{short_id}"


def write_csv(conn: duckdb.DuckDBPyConnection, path: Path, org: str = DEFAULT_ORG, kept: str | None = None) -> int:
    """Every row of the organization's latest result, streamed in batches, with an empty `decision` column an
    admin fills in (confirm / reject on probable matches); returns the row count. Its rows come in the page's
    order of statuses, what needs a person first and the matched rows last: a spreadsheet that stops at
    1,048,576 rows drops only matched ones. `kept`: the organization's kept database (kept_features.attached), where
    the file's index is kept, so that the next night copies the lines of the rows that did not change
    (spliced_csv)."""
    return spliced_csv.write(conn, csv_rows(org), path, kept).rows


def csv_rows(org: str) -> spliced_csv.Rows:
    """The reconciliation CSV's rows of the organization, as spliced_csv writes them."""
    return spliced_csv.Rows(
        source=f"(SELECT * FROM {RESULT_TABLE} WHERE org = {sql_literal(org)})", select=CSV_SELECT, order=CSV_ORDER,
        row_hash=f"hash({', '.join(CSV_READS)})", id_hash="hash(kol_id, crm_id)", header=CSV_COLUMNS)


def write_plan_csv(conn: duckdb.DuckDBPyConnection, path: Path, org: str = DEFAULT_ORG) -> int:
    """The stored plan, one row per planned change, with an empty `decision` column (approve / exclude)."""
    return spreadsheet_csv.write(conn, f"SELECT NULL AS decision, {', '.join(PLAN_COLUMNS[1:])} FROM {PLAN_TABLE} "
                                       f"WHERE org = {sql_literal(org)} ORDER BY action DESC, kol_id, crm_id, field",
                                 PLAN_COLUMNS, path)


def write_merge_for(conn: duckdb.DuckDBPyConnection, data_dir: str | Path, org: str) -> int:
    """latest-merge.csv of the organization again (after an admin chose a master); returns its row count."""
    directory = reports_dir(data_dir, org)
    directory.mkdir(parents=True, exist_ok=True)
    return duplicates.write_merge_csv(conn, _result_with_masters(org), directory / "latest-merge.csv")


def _result_with_masters(org: str) -> str:
    """The organization's result rows, suggested_master replaced by the master an admin chose."""
    return (f"(SELECT r.* REPLACE (coalesce(m.master_crm_id, r.suggested_master) AS suggested_master, "
            f"CASE WHEN m.master_crm_id IS NOT NULL THEN 'chosen by ' || m.\"user\" ELSE r.master_reason END AS master_reason) "
            f"FROM {RESULT_TABLE} r LEFT JOIN {MASTERS_TABLE} m ON m.org = r.org AND m.duplicate_set_id = r.duplicate_set_id "
            f"WHERE r.org = {sql_literal(org)})")


def _rows(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _sections(conn: duckdb.DuckDBPyConnection, counts: dict[str, int], limit: int, org: str) -> list[dict[str, Any]]:
    # The first rows of every status in one pass: per status, the row ids of the `limit` smallest sort keys (the
    # ORDER BY below as one key), then those rows. A query per status scanned the result ten times.
    rows = _rows(conn, f"""
WITH first AS (
  SELECT unnest(min_by(rowid, (CASE WHEN status = 'probable_match' THEN -match_score END, kol_id IS NULL,
                               coalesce(kol_id, ''), crm_id IS NULL, coalesce(crm_id, '')), {int(limit)})) AS id
  FROM {RESULT_TABLE} WHERE org = ? GROUP BY status
)
SELECT status, kol_id, kol_primary, crm_id, coalesce(kol_email, crm_email) AS email, kol_email, crm_email, kol_name,
       crm_name, institution, differences::VARCHAR AS differences, differences_not_written::VARCHAR AS differences_not_written,
       candidates::VARCHAR AS candidates, note, match_score, match_reasons::VARCHAR AS match_reasons, needs_review
FROM {RESULT_TABLE} WHERE org = ? AND rowid IN (SELECT id FROM first)
ORDER BY status, CASE WHEN status = 'probable_match' THEN match_score END DESC, kol_id NULLS LAST, crm_id""", [org, org])
    by_status: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for key in ("differences", "differences_not_written", "candidates", "match_reasons"):
            row[key] = json.loads(row[key]) if row[key] else None
        by_status.setdefault(row.pop("status"), []).append(row)
    sections = []
    for status in PROBLEMS_FIRST:
        if not counts.get(status):
            continue
        shown = by_status.get(status, [])
        action = Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(ACTIONS[status]))))
        sections.append({"status": status, "action": action, "rows": shown, "total": counts[status],
                         "truncated": counts[status] > len(shown)})
    return sections


def _duplicate_sets(conn: duckdb.DuckDBPyConnection, limit: int, org: str) -> dict[str, Any]:
    total = conn.execute(f"SELECT count(DISTINCT duplicate_set_id) FROM {RESULT_TABLE} WHERE org = ?", [org]).fetchall()[0][0]
    rows = _rows(conn, f"""
SELECT duplicate_set_id, any_value(suggested_master) AS suggested_master, any_value(master_reason) AS master_reason,
       list({{'crm_id': crm_id, 'name': crm_name, 'email': crm_email, 'status': status}} ORDER BY crm_id) AS members
FROM {_result_with_masters(org)} WHERE duplicate_set_id IS NOT NULL
GROUP BY duplicate_set_id ORDER BY duplicate_set_id LIMIT {int(limit)}""")
    return {"total": total, "rows": rows, "truncated": total > len(rows)}


def _plan(conn: duckdb.DuckDBPyConnection, limit: int, org: str) -> dict[str, Any]:
    """What `--apply` would do with this result (the stored plan): creates, updates, and the KOLs left for review."""
    create_total, update_total, update_records = conn.execute(f"""
SELECT count(DISTINCT kol_id) FILTER (WHERE action = 'create'), count(*) FILTER (WHERE action = 'update'),
       count(DISTINCT crm_id) FILTER (WHERE action = 'update') FROM {PLAN_TABLE} WHERE org = ?""", [org]).fetchall()[0]
    creates = _rows(conn, f"""
SELECT kol_id, map_from_entries(list({{'k': field, 'v': new_value}})) AS f FROM {PLAN_TABLE}
WHERE org = ? AND action = 'create' AND kol_id IN (SELECT DISTINCT kol_id FROM {PLAN_TABLE} WHERE org = ? AND
      action = 'create' ORDER BY kol_id LIMIT {int(limit)}) GROUP BY kol_id ORDER BY kol_id""", [org, org])
    creates = [{"kol_id": row["kol_id"], **dict(row["f"])} for row in creates]
    updates = _rows(conn, f"SELECT kol_id, crm_id, field, old_value, new_value FROM {PLAN_TABLE} WHERE org = ? AND "
                          f"action = 'update' ORDER BY kol_id, crm_id, field LIMIT {int(limit)}", [org])
    review = [{"kol_id": k, "crm_id": c, "score": s} for k, c, s in writeback.needs_review(conn, org)]
    return {"creates": creates, "create_total": create_total, "updates": updates, "update_total": update_total,
            "update_records": update_records, "review": review[:limit], "review_total": len(review)}


def _runs(conn: duckdb.DuckDBPyConnection, limit: int, org: str) -> list[dict[str, Any]]:
    return _rows(conn, f"SELECT * FROM (SELECT * FROM {RUNS_TABLE} WHERE org = ? ORDER BY reconciled_at DESC "
                       f"LIMIT {int(limit)}) ORDER BY reconciled_at", [org])


def _trend(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What changed between runs, per status: the change since the previous run (up or down) and the changes
    run to run over the window (bars above the line for more rows, below for fewer). None for a single run."""
    if len(runs) < 2:
        return None
    rows, unchanged = [], []
    for status in STATUSES:
        values = [int(run[status] or 0) for run in runs]
        deltas = [b - a for a, b in zip(values, values[1:])]
        if not any(deltas):
            unchanged.append(status)
            continue
        rows.append({"status": status, "now": values[-1], "change": deltas[-1], "svg": Markup(_delta_bars(status, deltas))})
    return {"runs": len(runs), "rows": rows, "unchanged": unchanged, "since": runs[-2]["reconciled_at"]}


def _delta_bars(status: str, deltas: list[int]) -> str:
    """Inline SVG: one bar per run-to-run change, up (more rows) or down (fewer), scaled to the largest."""
    width, height, bar = 240, 36, max(2, min(16, 240 // max(len(deltas), 1) - 2))
    top = max(abs(d) for d in deltas) or 1
    mid = height / 2
    parts = [f'<svg class="deltas" data-status="{status}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="changes of {status} run to run">',
             f'<line x1="0" y1="{mid}" x2="{width}" y2="{mid}" stroke="#bbb"/>']
    for i, delta in enumerate(deltas):
        size = abs(delta) / top * (mid - 2)
        y = mid - size if delta > 0 else mid
        colour = "#c62828" if delta > 0 else "#2e7d32"
        parts.append(f'<rect class="{"up" if delta > 0 else "down" if delta < 0 else "same"}" x="{i * (bar + 2)}" '
                     f'y="{y:.1f}" width="{bar}" height="{max(size, 0.5):.1f}" fill="{colour}">'
                     f'<title>{delta:+d}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def write_reports(
    conn: duckdb.DuckDBPyConnection, directory: Path | str, rows_per_status: int = HTML_ROWS_PER_STATUS,
    writable: bool = True, record_base_url: str | None = None, org: str = DEFAULT_ORG, review_url: str | None = None,
    kept: str | None = None, before_page: Callable[[], object] = lambda: None,
) -> tuple[Path, Path]:
    """reconciliation-<run>.csv/.html, -merge.csv and -plan.csv (and latest.*) for the organization's latest run
    in `directory`; records the CSV and HTML paths on the run's reconciliation_runs row. Returns (csv, html).
    `writable`: the CRM takes write-back (Salesforce); `record_base_url`: links contact ids to Salesforce;
    `review_url`: the review page the report links to (COMMOPS_REVIEW_URL); `kept`: the organization's kept database
    (kept_features.attached), which lets the CSV copy the last one's unchanged lines; `before_page`: work on `conn`
    that the page and the plan CSV read (storing the write-back plan), done while the CSV of every row is written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_abandoned(directory)  # a night killed while writing a report leaves its file beside
    runs = _runs(conn, TREND_RUNS, org)
    run = runs[-1]
    stamp = run_stamp(run)
    csv_path, html_path = directory / f"reconciliation-{stamp}.csv", directory / f"reconciliation-{stamp}.html"
    merge_path = directory / f"reconciliation-{stamp}-merge.csv"
    plan_path = directory / f"reconciliation-{stamp}-plan.csv"
    # The CSV of every row (DuckDB's sort, Arrow's kernels and the file; a later night copies its unchanged lines) is
    # written on a cursor of its own beside the rest: `before_page` on `conn`, then the page, mostly Python's. It reads
    # only the result, so the plan's storing can run beside it.
    with sql.cursor(conn) as own, ThreadPoolExecutor(max_workers=1) as beside:
        every_row = beside.submit(write_csv, own, csv_path, org, kept)
        before_page()
        write_plan_csv(conn, plan_path, org)
        merges = duplicates.write_merge_csv(conn, _result_with_masters(org), merge_path)
        counts = {status: int(run[status] or 0) for status in STATUSES}
        environment = jinja2.Environment(
            loader=jinja2.PackageLoader("crm", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
        )
        html = environment.get_template("reconciliation.html.j2").render(
            run=run, org=org, counts=list(counts.items()), sections=_sections(conn, counts, rows_per_status, org),
            trend=_trend(runs), csv_name=csv_path.name, plan_name=plan_path.name,
            merge_name=merge_path.name, merges=merges, duplicate_sets=_duplicate_sets(conn, rows_per_status, org),
            plan=_plan(conn, rows_per_status, org), writable=writable, review_url=_review_link(review_url, org),
            record_url=(record_base_url.rstrip("/") + "/lightning/r/Contact/{}/view") if record_base_url else None,
        )
        with replacing(html_path) as temp:
            temp.write_text(html, encoding="utf-8")
        every_row.result()
    for path, latest in ((csv_path, "latest.csv"), (html_path, "latest.html"), (merge_path, "latest-merge.csv"),
                         (plan_path, "latest-plan.csv")):
        link_over(path, directory / latest)
    conn.execute(f"UPDATE {RUNS_TABLE} SET report_csv = ?, report_html = ? WHERE org = ? AND run_id = ?",
                 [str(csv_path), str(html_path), org, run["run_id"]])
    return csv_path, html_path


def _review_link(review_url: str | None, org: str) -> str | None:
    """The review page of the organization, when one is configured (http(s) only: it becomes a link)."""
    if not review_url or not re.match(r"^https?://", review_url.strip()):
        return None
    return f"{review_url.strip().rstrip('/')}/?org={quote(org)}"


def markdown_summary(conn: duckdb.DuckDBPyConnection, org: str = DEFAULT_ORG) -> str:
    """Counts of the organization's latest run as a markdown table (Dagster materialization preview)."""
    run = _runs(conn, 1, org)[-1]
    lines = [f"**CRM reconciliation {run['run_id']}**: {run['kols']} KOLs, {run['contacts']} contacts, "
             f"{(run['duration_seconds'] or 0):.1f} s", "", "| status | rows |", "|---|---:|"]
    lines += [f"| {status} | {run[status] or 0} |" for status in STATUSES]
    lines += ["", f"KOLs needing review: {run.get('needs_review') or 0}; duplicate sets in the CRM: "
                  f"{run.get('duplicate_sets') or 0}"]
    if run.get("report_html"):
        lines += ["", f"Report: `{run['report_html']}`"]
    return "\n".join(lines)
