"""Response shapes, for the OpenAPI document only: handlers build plain dicts and
serialize them directly (no validation on the way out); these models describe them.
Field order and presence follow spec part 2; `updated_at` and `is_archived` are
extensions (docs/spec-decisions.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from commops_spec.constants import (
    CAMPAIGN_STATUSES,
    CAMPAIGN_TYPES,
    ENGAGEMENT_LEVELS,
    IMPACT_LEVELS,
    KOL_TIERS,
    PRODUCT_STATUSES,
    SCHEDULE_TYPES,
    SENTIMENTS,
)

Tier = Literal[KOL_TIERS]  # type: ignore[valid-type]
Engagement = Literal[ENGAGEMENT_LEVELS]  # type: ignore[valid-type]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class ListMeta(BaseModel):
    page: int
    per_page: int
    total: int


class KolListMeta(ListMeta):
    total_pages: int


class SignalListMeta(ListMeta):
    unread_count: int


class LocationOut(BaseModel):
    city: str | None
    state: str | None
    country: str | None


class SocialOut(BaseModel):
    linkedin: str | None
    twitter: str | None


class KolFlat(BaseModel):
    id: str
    full_name: str
    title: str | None
    institution: str | None
    department: str | None
    specialties: list[str]
    expertise_areas: list[str]
    tags: list[str]
    tier: Tier
    engagement_level: Engagement
    email: str | None
    phone: str | None
    location: LocationOut
    event_count: int
    last_interaction: str | None
    is_archived: bool
    created_at: str
    updated_at: str


class KolCreated(KolFlat):
    """The flat shape plus the supplied bio, notes, research_interests and social."""

    bio: str | None = None
    notes: str | None = None
    research_interests: list[str] | None = None
    social: SocialOut | None = None


class AddressOut(BaseModel):
    street: str | None
    city: str | None
    state: str | None
    postal_code: str | None
    country: str | None


class ContactOut(BaseModel):
    email: str | None
    phone: str | None
    address: AddressOut


class KolMetrics(BaseModel):
    total_events: int
    total_campaigns: int
    email_open_rate: float = Field(ge=0, le=1)
    response_rate: float = Field(ge=0, le=1)
    h_index: int
    publications_count: int


class KolEventOut(BaseModel):
    id: str
    name: str
    date: str
    role: str
    rsvp_status: str
    attended: bool


class KolCampaignOut(BaseModel):
    id: str
    name: str
    sent_at: str | None = Field(description="date of sending (YYYY-MM-DD), null while not sent")
    status: Literal[CAMPAIGN_STATUSES]  # type: ignore[valid-type]


class InteractionOut(BaseModel):
    id: str
    type: str
    occurred_at: str
    summary: str | None
    responded: bool


class PublicationOut(BaseModel):
    id: str
    title: str
    journal: str | None
    year: int | None
    citations: int
    doi: str | None


class KolDetail(BaseModel):
    id: str
    full_name: str
    title: str | None
    institution: str | None
    department: str | None
    bio: str | None
    specialties: list[str]
    expertise_areas: list[str]
    research_interests: list[str]
    tags: list[str]
    tier: Tier
    engagement_level: Engagement
    contact: ContactOut
    social: SocialOut
    metrics: KolMetrics
    events: list[KolEventOut] | None = Field(None, description="only with include=events")
    campaigns: list[KolCampaignOut] | None = Field(None, description="only with include=campaigns")
    interactions: list[InteractionOut] | None = Field(None, description="only with include=interactions")
    publications: list[PublicationOut] | None = Field(None, description="only with include=publications")
    last_interaction: str | None
    notes: str | None
    is_archived: bool
    created_at: str
    updated_at: str


class CampaignEmailOut(BaseModel):
    subject: str | None
    from_name: str | None


class ScheduleOut(BaseModel):
    type: Literal[SCHEDULE_TYPES]  # type: ignore[valid-type]
    send_at: str | None
    frequency: str | None = None


class CampaignMetrics(BaseModel):
    sent: int
    delivered: int
    opened: int
    clicked: int
    open_rate: float = Field(ge=0, le=1)
    click_rate: float = Field(ge=0, le=1)


class CampaignOut(BaseModel):
    id: str
    name: str
    description: str | None
    type: Literal[CAMPAIGN_TYPES]  # type: ignore[valid-type]
    status: Literal[CAMPAIGN_STATUSES]  # type: ignore[valid-type]
    audience_count: int
    email: CampaignEmailOut
    schedule: ScheduleOut
    products: list[str]
    metrics: CampaignMetrics
    created_at: str
    updated_at: str
    sent_at: str | None


class ProductLineOut(BaseModel):
    id: str
    name: str


class SpecificationOut(BaseModel):
    name: str
    value: str


class ProductOut(BaseModel):
    id: str
    name: str
    description: str | None
    product_line: ProductLineOut | None
    status: Literal[PRODUCT_STATUSES]  # type: ignore[valid-type]
    regulatory_status: str | None
    target_markets: list[str]
    key_features: list[str]
    specifications: list[SpecificationOut]
    market_status: dict[str, dict[str, Any]]
    created_at: str
    updated_at: str


class SourceOut(BaseModel):
    name: str
    country: str | None
    region: str | None


class ImpactOut(BaseModel):
    level: Literal[IMPACT_LEVELS]  # type: ignore[valid-type]
    score: float
    categories: list[str]


class RelevanceOut(BaseModel):
    product_id: str
    product_name: str
    relevance_type: str
    relevance_score: float


class SignalOut(BaseModel):
    id: str
    title: str
    url: str | None
    source: SourceOut
    content: str | None
    ai_summary: str | None
    impact: ImpactOut
    sentiment: Literal[SENTIMENTS]  # type: ignore[valid-type]
    product_relevance: list[RelevanceOut]
    is_read: bool
    is_bookmarked: bool
    published_at: str
    fetched_at: str
    updated_at: str


class KolCreatedResponse(BaseModel):
    data: KolCreated


class KolDetailResponse(BaseModel):
    data: KolDetail


class KolList(BaseModel):
    data: list[KolFlat]
    meta: KolListMeta


class CampaignResponse(BaseModel):
    data: CampaignOut


class CampaignList(BaseModel):
    data: list[CampaignOut]
    meta: ListMeta


class ProductList(BaseModel):
    data: list[ProductOut]
    meta: ListMeta


class SignalList(BaseModel):
    data: list[SignalOut]
    meta: SignalListMeta


# ---------------------------------------------------------------- webhooks (4.8) and their deliveries

DeliveryStatus = Literal["pending", "held", "delivered", "failed", "cancelled"]


class WebhookOut(BaseModel):
    id: str = Field(description="wh_...")
    url: str
    events: list[str]
    enabled: bool
    status: Literal["active", "failed"] = Field(description="failed once a delivery exhausted its retries")
    failed_at: str | None
    failure_reason: str | None
    created_at: str
    updated_at: str


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(description="the signing secret; returned by this response only")


class WebhookCreated(BaseModel):
    data: WebhookCreatedOut


class WebhookResponse(BaseModel):
    data: WebhookOut


class WebhookList(BaseModel):
    data: list[WebhookOut]
    meta: ListMeta


class DeletedOut(BaseModel):
    id: str
    deleted: bool


class WebhookDeleted(BaseModel):
    data: DeletedOut


class TestOutcome(BaseModel):
    delivery_id: str
    event_id: str = Field(description="wh_evt_... of the sample payload, also the webhook-id header")
    event: str
    success: bool = Field(description="true for a 2xx answer")
    status_code: int | None = Field(description="the receiver's status; null on timeout or connection error")
    latency_ms: float
    attempt: int
    error: str | None
    response_excerpt: str | None = Field(description="the first 1,024 characters of the receiver's answer")


class TestOutcomeResponse(BaseModel):
    data: TestOutcome


class AttemptOut(BaseModel):
    attempt: int = Field(description="1 = first attempt, 2 = first retry, ...")
    started_at: str
    status_code: int | None
    error: str | None
    latency_ms: float
    response_excerpt: str | None


class DeliveryOut(BaseModel):
    id: str = Field(description="whd_...")
    webhook_id: str
    event_id: str
    event: str
    test: bool
    status: DeliveryStatus
    attempt_count: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None
    created_at: str
    updated_at: str
    delivered_at: str | None
    attempts: list[AttemptOut]


class DeliveryResponse(BaseModel):
    data: DeliveryOut


class DeliveryList(BaseModel):
    data: list[DeliveryOut]
    meta: ListMeta


class RequeuedOut(BaseModel):
    webhook: WebhookOut
    requeued: int


class RequeuedResponse(BaseModel):
    data: RequeuedOut
