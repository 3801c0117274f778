"""/v1/campaigns: create (campaigns:write) and list (campaigns:read)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from commops_spec.constants import CAMPAIGN_STATUSES, CAMPAIGN_TYPES, KOL_TIERS, SCHEDULE_TYPES
from service.auth import require_scope
from service.errors import invalid
from service.routes import common, schemas
from service.routes.common import NotBlank
from service.routes.kols import Email, Specialty, Token
from service.routes.query import Param, documented, page_params, paging, parse, sort_params
from service.store import campaigns as store
from service.store import db as store_db

router = APIRouter()

Id = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class AudienceFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tier: list[Literal[KOL_TIERS]] | None = Field(None, max_length=3)  # type: ignore[valid-type]
    specialty: list[Specialty] | None = Field(None, max_length=50)
    tags: list[Token] | None = Field(None, max_length=50)


class Audience(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    kol_ids: list[Id] | None = Field(None, max_length=10_000, description="KOL ids of the organization")
    filters: AudienceFilters | None = Field(None, description="active KOLs with an email matching every given array")
    external_contacts: list[Email] | None = Field(None, max_length=10_000)


class EmailContent(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    subject: Annotated[str, StringConstraints(min_length=1, max_length=500), NotBlank]
    body_html: Annotated[str, StringConstraints(min_length=1, max_length=500_000), NotBlank]
    from_name: Annotated[str, StringConstraints(max_length=200)] | None = None
    reply_to: Email | None = None
    body_text: Annotated[str, StringConstraints(max_length=500_000)] | None = None


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal[SCHEDULE_TYPES] = "immediate"  # type: ignore[valid-type]
    send_at: AwareDatetime | None = Field(None, description="required and in the future when type is scheduled; "
                                                            "optional first send (future) when recurring")
    frequency: Literal["daily", "weekly", "monthly"] | None = Field(None, description="required when recurring")


class CampaignCreate(BaseModel):
    """Body of POST /v1/campaigns (spec 4.4). Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: Annotated[str, StringConstraints(min_length=1, max_length=200), NotBlank]
    description: Annotated[str, StringConstraints(max_length=5_000)] | None = None
    type: Literal[CAMPAIGN_TYPES]  # type: ignore[valid-type]
    audience: Audience
    email: EmailContent
    products: list[Id] | None = Field(None, max_length=100)
    schedule: Schedule | None = None


LIST_PARAMS = [
    *page_params(),
    Param("status", "choices", "Comma-separated statuses.", CAMPAIGN_STATUSES),
    Param("type", "choices", "Comma-separated campaign types.", CAMPAIGN_TYPES),
    Param("search", "text", "Case-insensitive substring of the campaign name."),
    *sort_params(store.SORT_FIELDS, "created_at"),
]


@router.post(
    "/v1/campaigns", status_code=201, response_model=schemas.CampaignResponse, responses=common.errors(400, 403, 415),
    openapi_extra=common.request_body(CampaignCreate), summary="Create a campaign (status draft)", tags=["campaigns"],
)
async def create_campaign(request: Request) -> Response:
    caller = require_scope(request, "campaigns:write")
    body = (await common.read_body(request, CampaignCreate)).model_dump(mode="json", exclude_none=True)

    def create():  # runs on a worker thread: it takes that thread's connection
        conn = common.db(request)
        with store_db.transaction(conn):
            return store.create_campaign(conn, caller.org_id, body)

    try:
        created = await run_in_threadpool(create)
    except store.CampaignRejected as exc:
        raise invalid(exc.field, exc.reason, str(exc), **exc.details) from None
    return common.json_response({"data": common.drift(request, created)}, 201)


@router.get(
    "/v1/campaigns", response_model=schemas.CampaignList, responses=common.errors(400, 403),
    openapi_extra=documented(LIST_PARAMS), summary="List campaigns", tags=["campaigns"],
)
def list_campaigns(request: Request) -> Response:
    caller = require_scope(request, "campaigns:read")
    q = parse(request, LIST_PARAMS)
    items, total = store.list_campaigns(
        common.db(request), caller.org_id, statuses=q["status"], types=q["type"], search=q["search"],
        paging=paging(q),
    )
    for item in items:
        common.drift(request, item)
    return common.list_response(items, q, total)
