"""Derived KOL fields, recomputed from their inputs whenever those change.

Formulas (also in docs/spec-decisions.md):
- event_count = total_events = events the KOL attended (event_attendees.attended = 1).
- total_campaigns = campaigns sent to the KOL (campaign_recipients.sent_at set).
- email_open_rate = opened / delivered over those campaigns (0 when none delivered).
- response_rate = interactions the KOL answered / all interactions (0 when none).
- publications_count = publications; h_index = largest h with h publications cited >= h times.
- last_interaction = latest of interactions.occurred_at, attended event dates and
  campaign opens or clicks; NULL when there is none.
- engagement_level from score = 3 * event_count + 2 * interactions + 10 * email_open_rate:
  high when score >= 20, medium when score >= 8, low otherwise.
None of these depend on the clock, so a KOL's representation changes only when its
inputs do; when it changes, updated_at moves too (syncs rely on that).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

_DERIVED = """
WITH target(id) AS (SELECT value FROM json_each(:ids)),
att AS (
    SELECT a.kol_id, count(*) AS n, max(e.date || 'T09:00:00.000000Z') AS last_at
    FROM event_attendees a JOIN events e ON e.id = a.event_id
    WHERE a.attended = 1 AND a.kol_id IN (SELECT id FROM target) GROUP BY a.kol_id),
inter AS (
    SELECT kol_id, count(*) AS n, sum(responded) AS answered, max(occurred_at) AS last_at
    FROM interactions WHERE kol_id IN (SELECT id FROM target) GROUP BY kol_id),
camp AS (
    SELECT kol_id,
           count(*) FILTER (WHERE sent_at IS NOT NULL) AS sent,
           count(*) FILTER (WHERE delivered_at IS NOT NULL) AS delivered,
           count(*) FILTER (WHERE opened_at IS NOT NULL) AS opened,
           max(coalesce(clicked_at, opened_at)) AS last_at
    FROM campaign_recipients WHERE kol_id IN (SELECT id FROM target) GROUP BY kol_id),
pubs AS (
    SELECT kol_id, count(*) AS n,
           (SELECT count(*) FROM (
                SELECT citations, row_number() OVER (ORDER BY citations DESC) AS rank
                FROM publications p2 WHERE p2.kol_id = p.kol_id) WHERE citations >= rank) AS h
    FROM publications p WHERE kol_id IN (SELECT id FROM target) GROUP BY kol_id),
derived AS (
    SELECT t.id,
           coalesce(att.n, 0) AS event_count,
           coalesce(camp.sent, 0) AS total_campaigns,
           CASE WHEN coalesce(camp.delivered, 0) = 0 THEN 0.0
                ELSE round(1.0 * camp.opened / camp.delivered, 4) END AS email_open_rate,
           CASE WHEN coalesce(inter.n, 0) = 0 THEN 0.0
                ELSE round(1.0 * inter.answered / inter.n, 4) END AS response_rate,
           coalesce(pubs.n, 0) AS publications_count,
           coalesce(pubs.h, 0) AS h_index,
           nullif(max(coalesce(inter.last_at, ''), coalesce(att.last_at, ''), coalesce(camp.last_at, '')), '')
               AS last_interaction,
           coalesce(inter.n, 0) AS interactions
    FROM target t
    LEFT JOIN att ON att.kol_id = t.id
    LEFT JOIN inter ON inter.kol_id = t.id
    LEFT JOIN camp ON camp.kol_id = t.id
    LEFT JOIN pubs ON pubs.kol_id = t.id),
scored AS (
    SELECT *, CASE
        WHEN 3 * event_count + 2 * interactions + 10 * email_open_rate >= 20 THEN 'high'
        WHEN 3 * event_count + 2 * interactions + 10 * email_open_rate >= 8 THEN 'medium'
        ELSE 'low' END AS engagement_level
    FROM derived)
UPDATE kols SET
    event_count = s.event_count,
    total_campaigns = s.total_campaigns,
    email_open_rate = s.email_open_rate,
    response_rate = s.response_rate,
    publications_count = s.publications_count,
    h_index = s.h_index,
    last_interaction = s.last_interaction,
    engagement_level = s.engagement_level,
    updated_at = CASE WHEN :touch THEN :now ELSE kols.updated_at END
FROM scored s
WHERE kols.id = s.id AND (
    kols.event_count IS NOT s.event_count OR kols.total_campaigns IS NOT s.total_campaigns
    OR kols.email_open_rate IS NOT s.email_open_rate OR kols.response_rate IS NOT s.response_rate
    OR kols.publications_count IS NOT s.publications_count OR kols.h_index IS NOT s.h_index
    OR kols.last_interaction IS NOT s.last_interaction OR kols.engagement_level IS NOT s.engagement_level)
RETURNING kols.id
"""


def refresh_kol_metrics(
    conn: sqlite3.Connection, kol_ids: Iterable[str], *, now: str | None = None, touch: bool = True
) -> list[str]:
    """Recompute the derived fields of `kol_ids`; return the ids whose values changed.

    With touch=True (the default) a changed KOL gets updated_at = now. Seeding passes
    touch=False: its rows are new and their timestamps are already set.
    """
    import json

    from service.store.db import now_iso

    ids = list(dict.fromkeys(kol_ids))
    if not ids:
        return []
    params = {"ids": json.dumps(ids), "touch": 1 if touch else 0, "now": now or now_iso()}
    return [row[0] for row in conn.execute(_DERIVED, params).fetchall()]
