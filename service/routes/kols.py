"""/v1/kols: create (kols:write), list and get (kols:read)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from commops_spec.constants import ENGAGEMENT_LEVELS, KOL_TIERS
from service.auth import require_scope
from service.errors import ApiError, not_found
from service.routes import common, schemas
from service.routes.common import NotBlank
from service.routes.query import Param, documented, page_params, paging, parse, sort_params
from service.store import db as store_db
from service.store import kols as store

router = APIRouter()

EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
Email = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN, max_length=254)]
Specialty = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+(_[a-z0-9]+)*$", max_length=100)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200), NotBlank]
Short = Annotated[str, StringConstraints(max_length=300)]
Long = Annotated[str, StringConstraints(max_length=10_000)]
Token = Annotated[str, StringConstraints(min_length=1, max_length=200), NotBlank]


class LocationIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    city: Short | None = None
    state: Short | None = Field(None, description="state or province")
    country: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")] | None = Field(
        None, description="ISO 3166-1 alpha-2")


class SocialIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    linkedin: Short | None = Field(None, description="profile URL")
    twitter: Short | None = Field(None, description="handle")


class KolCreate(BaseModel):
    """Body of POST /v1/kols (spec 2.2). Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True)
    full_name: Name
    specialties: list[Specialty] = Field(min_length=1, max_length=50,
                                         description="lower-case snake-case tokens, at least one")
    title: Short | None = None
    institution: Short | None = None
    department: Short | None = None
    expertise_areas: list[Token] | None = Field(None, max_length=50)
    research_interests: list[Token] | None = Field(None, max_length=50)
    tier: Literal[KOL_TIERS] | None = Field(None, description="default tier_3")  # type: ignore[valid-type]
    email: Email | None = Field(None, description="unique per organization, case-insensitive")
    phone: Annotated[str, StringConstraints(max_length=50)] | None = None
    location: LocationIn | None = None
    bio: Long | None = None
    notes: Long | None = None
    tags: list[Token] | None = Field(None, max_length=50)
    social: SocialIn | None = None


LIST_PARAMS = [
    *page_params(),
    Param("tier", "choices", "Comma-separated tiers.", KOL_TIERS),
    Param("specialty", "tokens", "Comma-separated specialty tokens; matches KOLs with any of them."),
    Param("engagement_level", "choices", "Comma-separated engagement levels.", ENGAGEMENT_LEVELS),
    Param("search", "text", "Case-insensitive substring of full name, institution or email."),
    Param("tags", "tokens", "Comma-separated tags; matches KOLs with any of them."),
    Param("is_archived", "bool", "false: active KOLs only; true: archived KOLs only.", default=False),
    *sort_params(store.SORT_FIELDS, "created_at"),
]
GET_PARAMS = [Param("include", "choices", "Comma-separated related data to embed.", store.INCLUDES)]
ID_PARAM = {"name": "id", "in": "path", "required": True, "description": "KOL id (kol_...)",
            "schema": {"type": "string"}}


@router.post(
    "/v1/kols", status_code=201, response_model=schemas.KolCreatedResponse, responses=common.errors(400, 403, 409, 415),
    openapi_extra=common.request_body(KolCreate), summary="Create a KOL", tags=["kols"],
)
async def create_kol(request: Request) -> Response:
    caller = require_scope(request, "kols:write")
    body = await common.read_body(request, KolCreate)
    fields = body.model_dump(exclude_none=True)
    fields.setdefault("tier", "tier_3")
    limit = common.settings(request).kol_limits.get(caller.plan)

    def create():  # runs on a worker thread: it takes that thread's connection
        conn = common.db(request)
        with store_db.transaction(conn):
            return store.create_kol(conn, caller.org_id, fields, limit)

    try:
        created = await run_in_threadpool(create)
    except store.DuplicateEmail as exc:
        raise ApiError(409, "duplicate_email", str(exc), {"field": "email", "reason": "duplicate"}) from None
    except store.KolLimitReached as exc:
        raise ApiError(429, "kol_limit_reached", f"{exc}; archive KOLs or upgrade the plan",
                       {"limit": exc.limit, "plan": caller.plan}) from None
    return common.json_response({"data": common.drift(request, created, created["location"])}, 201)


@router.get(
    "/v1/kols", response_model=schemas.KolList, responses=common.errors(400, 403),
    openapi_extra=documented(LIST_PARAMS), summary="List KOLs", tags=["kols"],
)
def list_kols(request: Request) -> Response:
    caller = require_scope(request, "kols:read")
    q = parse(request, LIST_PARAMS)
    items, total = store.list_kols(
        common.db(request), caller.org_id,
        tiers=q["tier"], specialties=q["specialty"], engagement_levels=q["engagement_level"], tags=q["tags"],
        search=q["search"], is_archived=q["is_archived"],
        paging=paging(q),
    )
    if common.settings(request).extra_fields:
        for item in items:
            common.drift(request, item, item["location"])
    return common.list_response(items, q, total, total_pages=math.ceil(total / q["per_page"]))


@router.get(
    "/v1/kols/{id}", response_model=schemas.KolDetailResponse, responses=common.errors(400, 403, 404),
    openapi_extra={"parameters": [ID_PARAM, *(p.openapi() for p in GET_PARAMS)]}, summary="Get one KOL",
    tags=["kols"],
)
def get_kol(request: Request) -> Response:
    caller = require_scope(request, "kols:read")
    kol_id = request.path_params["id"]
    include = set(parse(request, GET_PARAMS)["include"] or ())
    try:
        detail = store.get_kol_detail(common.db(request), caller.org_id, kol_id, include)
    except store.KolNotFound:
        raise not_found("KOL", kol_id) from None
    return common.json_response({"data": common.drift(request, detail, detail["contact"]["address"])})
