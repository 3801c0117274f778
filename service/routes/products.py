"""/v1/products: list (products:read)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from commops_spec.constants import MARKETS, PRODUCT_STATUSES
from service.auth import require_scope
from service.routes import common, schemas
from service.routes.query import Param, documented, page_params, paging, parse, sort_params
from service.store import products as store

router = APIRouter()

LIST_PARAMS = [
    *page_params(),
    Param("status", "choices", "Comma-separated product statuses.", PRODUCT_STATUSES),
    Param("product_line", "tokens", "Comma-separated product line ids (pl_...)."),
    Param("target_market", "choices", "Comma-separated market codes; products targeting any of them.", MARKETS),
    Param("search", "text", "Case-insensitive substring of name or description."),
    *sort_params(store.SORT_FIELDS, "created_at"),
]


@router.get(
    "/v1/products", response_model=schemas.ProductList, responses=common.errors(400, 403),
    openapi_extra=documented(LIST_PARAMS), summary="List products", tags=["products"],
)
def list_products(request: Request) -> Response:
    caller = require_scope(request, "products:read")
    q = parse(request, LIST_PARAMS)
    items, total = store.list_products(
        common.db(request), caller.org_id, statuses=q["status"], product_lines=q["product_line"],
        target_markets=q["target_market"], search=q["search"],
        paging=paging(q),
    )
    for item in items:
        common.drift(request, item)
    return common.list_response(items, q, total)
