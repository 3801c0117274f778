"""/v1/signals: list (signals:read)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from commops_spec.constants import IMPACT_LEVELS, SENTIMENTS, SIGNAL_SOURCES
from service.auth import require_scope
from service.routes import common, schemas
from service.routes.query import Param, documented, page_params, paging, parse, sort_params
from service.store import signals as store

router = APIRouter()

LIST_PARAMS = [
    *page_params(),
    Param("source", "choices", "Comma-separated sources.", SIGNAL_SOURCES),
    Param("impact", "choices", "Comma-separated impact levels.", IMPACT_LEVELS),
    Param("sentiment", "choices", "Comma-separated sentiments.", SENTIMENTS),
    Param("product_id", "tokens", "Comma-separated product ids; signals relevant to any of them."),
    Param("is_bookmarked", "bool", "Only bookmarked (true) or not bookmarked (false) signals."),
    Param("is_read", "bool", "Only read (true) or unread (false) signals."),
    Param("search", "text", "Case-insensitive substring of title or content."),
    Param("published_after", "datetime", "Signals published strictly after this ISO 8601 date-time."),
    *sort_params(store.SORT_FIELDS, "published_at"),
]


@router.get(
    "/v1/signals", response_model=schemas.SignalList, responses=common.errors(400, 403),
    openapi_extra=documented(LIST_PARAMS), summary="List signals", tags=["signals"],
)
def list_signals(request: Request) -> Response:
    caller = require_scope(request, "signals:read")
    q = parse(request, LIST_PARAMS)
    items, total, unread = store.list_signals(
        common.db(request), caller.org_id, sources=q["source"], impacts=q["impact"], sentiments=q["sentiment"],
        product_ids=q["product_id"], is_bookmarked=q["is_bookmarked"], is_read=q["is_read"], search=q["search"],
        published_after=q["published_after"], paging=paging(q),
    )
    for item in items:
        common.drift(request, item)
    return common.list_response(items, q, total, unread_count=unread)
