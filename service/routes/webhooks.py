"""Webhook endpoints (4.8) plus the attempt log and redelivery.

Scopes: the spec has no webhook scope. A webhook pushes the data of the events it
subscribes to, so every webhook operation needs the read scope of each event group
involved (kol.* kols:read, event.* events:read, campaign.* campaigns:read, signal.*
signals:read). Operations that change webhooks or make the service send (create,
PATCH, DELETE, test, redeliver) also need the service's own scope webhooks:write.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.responses import Response

from commops_spec.constants import EVENTS
from service import auth
from service.scopes import WEBHOOKS_WRITE
from service.errors import ApiError, invalid, not_found
from service.routes import schemas
from service.routes.common import db, errors, json_response, list_response, read_body, request_body
from service.routes.query import Param, documented, page_params, parse
from service.store import deliveries
from service.store import webhooks as store
from service.store.db import new_id, to_iso, transaction
from service.webhooks.attempt import attempt, make_client
from service.webhooks.config import WebhookConfig
from service.webhooks.safety import is_public
from service.webhooks.samples import sample_payload
from service.webhooks.signing import generate_secret

router = APIRouter()

EVENT_GROUP_SCOPES = {
    "kol": "kols:read",
    "event": "events:read",
    "campaign": "campaigns:read",
    "signal": "signals:read",
}
DELIVERY_STATUSES = ("pending", "held", "delivered", "failed", "cancelled")
DELIVERY_PARAMS = [
    Param("status", "choices", "Delivery statuses, comma-separated.", DELIVERY_STATUSES),
    Param("event", "choice", "Only deliveries of this event name.", EVENTS),
    *page_params(),
]
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 256
MAX_URL_LENGTH = 2048


Url = Annotated[str, StringConstraints(min_length=1, max_length=MAX_URL_LENGTH)]
# Validated by _valid_events (so a 400 can list every unknown name); the enum is for the document.
EventName = Annotated[
    str, StringConstraints(min_length=1, max_length=100), Field(json_schema_extra={"enum": list(EVENTS)})
]
EventList = Annotated[list[EventName], Field(max_length=100, description="event names of part 6; at least one")]


class CreateWebhook(BaseModel):
    """Body of POST /v1/webhooks. Without a secret, a 256-bit one is generated (shown once)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: Url = Field(description="http:// or https:// URL receiving the POSTs")
    events: EventList
    secret: Annotated[str, StringConstraints(max_length=MAX_SECRET_LENGTH)] | None = Field(
        None, description=f"signing secret, {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters"
    )


class UpdateWebhook(BaseModel):
    """Body of PATCH /v1/webhooks/{id}: events and/or enabled."""

    model_config = ConfigDict(extra="forbid", strict=True)
    events: EventList | None = None
    enabled: bool | None = None


class TestEvent(BaseModel):
    """Body of POST /v1/webhooks/{id}/test."""

    model_config = ConfigDict(extra="forbid", strict=True)
    event: EventName


class RedeliverSince(BaseModel):
    """Body of POST /v1/webhooks/{id}/redeliver: failed deliveries created at or after `since`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    since: datetime


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    documented = errors(*(status for status in statuses if status != 409))
    if 409 in statuses:
        documented[409] = {
            "model": schemas.ErrorEnvelope,
            "description": "The delivery is still queued or is a test (not_redeliverable)",
        }
    return documented


async def _with_body(request: Request, model: type[BaseModel], handler: Callable[..., Response], *args: Any) -> Response:
    """Read the body on the event loop, then run handler(request, *args, body) on a worker
    thread, where it takes that thread's database connection."""
    body = await read_body(request, model)
    return await run_in_threadpool(handler, request, *args, body)


# ---------------------------------------------------------------- endpoints


@router.post(
    "/v1/webhooks",
    status_code=201,
    response_model=schemas.WebhookCreated,
    responses=_errors(400, 403, 415),
    openapi_extra=request_body(CreateWebhook),
)
async def create_webhook(request: Request) -> Response:
    return await _with_body(request, CreateWebhook, _create)


def _create(request: Request, body: CreateWebhook) -> Response:
    auth.require_scope(request, WEBHOOKS_WRITE)
    events = _valid_events(body.events)
    caller = _require_event_scopes(request, events)
    url = _valid_url(body.url, _config(request))
    secret = _valid_secret(body.secret) if body.secret is not None else generate_secret()
    conn = db(request)
    with transaction(conn):
        created = store.create_webhook(conn, caller.org_id, url, events, secret)
    # The only time the secret leaves the service.
    return json_response({"data": {**created, "secret": secret}}, 201)


@router.get(
    "/v1/webhooks",
    response_model=schemas.WebhookList,
    responses=_errors(400, 403),
    openapi_extra=documented(page_params()),
)
def list_webhooks(request: Request) -> Response:
    """The webhooks whose events the key may read (all of them for a key with every read scope)."""
    caller = auth.principal(request)
    if not caller.scopes & set(EVENT_GROUP_SCOPES.values()):
        _require_event_scopes(request, ["kol.created"])
    paging = parse(request, page_params())
    page_number, size = paging["page"], paging["per_page"]
    webhooks = store.list_webhooks(db(request), caller.org_id)
    visible = [webhook for webhook in webhooks if _scopes_for(webhook["events"]) <= caller.scopes]
    items = visible[(page_number - 1) * size : page_number * size]
    return list_response(items, paging, len(visible))


@router.patch(
    "/v1/webhooks/{webhook_id}",
    response_model=schemas.WebhookResponse,
    responses=_errors(400, 403, 404, 415),
    openapi_extra=request_body(UpdateWebhook),
)
async def update_webhook(request: Request, webhook_id: str) -> Response:
    return await _with_body(request, UpdateWebhook, _update, webhook_id)


def _update(request: Request, webhook_id: str, body: UpdateWebhook) -> Response:
    auth.require_scope(request, WEBHOOKS_WRITE)
    if body.events is None and body.enabled is None:
        raise invalid("body", "missing", "Send events and/or enabled")
    events = _valid_events(body.events) if body.events is not None else None
    caller, _ = _owned_webhook(request, webhook_id, extra_events=events or ())
    conn = db(request)
    with transaction(conn):
        updated = store.update_webhook(conn, caller.org_id, webhook_id, events=events, enabled=body.enabled)
    return json_response({"data": updated})


@router.delete("/v1/webhooks/{webhook_id}", response_model=schemas.WebhookDeleted, responses=_errors(403, 404))
def delete_webhook(request: Request, webhook_id: str) -> Response:
    auth.require_scope(request, WEBHOOKS_WRITE)
    caller, _ = _owned_webhook(request, webhook_id)
    conn = db(request)
    with transaction(conn):
        store.delete_webhook(conn, caller.org_id, webhook_id)
    return json_response({"data": {"id": webhook_id, "deleted": True}})


@router.post(
    "/v1/webhooks/{webhook_id}/test",
    response_model=schemas.TestOutcomeResponse,
    responses=_errors(400, 403, 404, 415),
    openapi_extra=request_body(TestEvent),
)
async def test_webhook(request: Request, webhook_id: str) -> Response:
    """Send a sample of `event` now, once, and answer with the outcome (never retried)."""
    auth.require_scope(request, WEBHOOKS_WRITE)
    body = await read_body(request, TestEvent)
    _valid_events([body.event], field="event")
    caller, target = await run_in_threadpool(_test_target, request, webhook_id, body.event)
    config = _config(request)
    event_id, payload = sample_payload(caller.org_id, body.event)
    if not config.allow_private and _obviously_private(httpx.URL(target["url"]).host):
        raise _private_address(httpx.URL(target["url"]).host)  # registered while private targets were allowed
    async with make_client(config) as client:
        outcome = await attempt(client, config, target["url"], target["secret"], event_id, payload)
    record = deliveries.AttemptRecord(new_id(deliveries.DELIVERY_PREFIX, 20), webhook_id, outcome)
    await run_in_threadpool(
        lambda: deliveries.record_test_delivery(db(request), caller.org_id, event_id, body.event, payload, record)
    )
    if outcome.error and outcome.error.startswith("address_refused"):
        # The name resolved to a refused address (checked on connect): nothing was sent or read.
        raise _private_address(httpx.URL(target["url"]).host)
    return json_response(
        {
            "data": {
                "delivery_id": record.delivery_id,
                "event_id": event_id,
                "event": body.event,
                "success": outcome.succeeded,
                "status_code": outcome.status_code,
                "latency_ms": round(outcome.latency_ms, 3),
                "attempt": 1,
                "error": outcome.error,
                "response_excerpt": outcome.response_excerpt,
            }
        }
    )


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    response_model=schemas.DeliveryList,
    responses=_errors(400, 403, 404),
    openapi_extra=documented(DELIVERY_PARAMS),
)
def list_deliveries(request: Request, webhook_id: str) -> Response:
    """Deliveries newest first, each with its attempt log."""
    caller, _ = _owned_webhook(request, webhook_id)
    query = parse(request, DELIVERY_PARAMS)
    items, total = deliveries.list_deliveries(
        db(request),
        caller.org_id,
        webhook_id,
        statuses=query["status"],
        event=query["event"],
        page=query["page"],
        per_page=query["per_page"],
    )
    return list_response(items, query, total)


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}",
    response_model=schemas.DeliveryResponse,
    responses=_errors(403, 404),
)
def get_delivery(request: Request, webhook_id: str, delivery_id: str) -> Response:
    caller, _ = _owned_webhook(request, webhook_id)
    try:
        delivery = deliveries.get_delivery(db(request), caller.org_id, webhook_id, delivery_id)
    except deliveries.DeliveryNotFound:
        raise not_found("delivery", delivery_id) from None
    return json_response({"data": delivery})


@router.post(
    "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    response_model=schemas.DeliveryResponse,
    responses=_errors(403, 404, 409),
)
def redeliver_one(request: Request, webhook_id: str, delivery_id: str) -> Response:
    auth.require_scope(request, WEBHOOKS_WRITE)
    caller, _ = _owned_webhook(request, webhook_id)
    conn = db(request)
    try:
        with transaction(conn):
            count = deliveries.redeliver(conn, caller.org_id, webhook_id, delivery_id=delivery_id)
    except deliveries.DeliveryNotFound:
        raise not_found("delivery", delivery_id) from None
    if count == 0:
        raise ApiError(
            409,
            "not_redeliverable",
            "Only delivered, failed or cancelled deliveries of real events can be redelivered; "
            "this one is still queued or is a test delivery",
            {"id": delivery_id},
        )
    return json_response({"data": deliveries.get_delivery(conn, caller.org_id, webhook_id, delivery_id)})


@router.post(
    "/v1/webhooks/{webhook_id}/redeliver",
    response_model=schemas.RequeuedResponse,
    responses=_errors(400, 403, 404, 415),
    openapi_extra=request_body(RedeliverSince),
)
async def redeliver_failed(request: Request, webhook_id: str) -> Response:
    return await _with_body(request, RedeliverSince, _redeliver_failed, webhook_id)


def _redeliver_failed(request: Request, webhook_id: str, body: RedeliverSince) -> Response:
    """Queue again every failed delivery created at or after `since`."""
    auth.require_scope(request, WEBHOOKS_WRITE)
    if body.since.tzinfo is None:
        raise invalid("since", "timezone_required", "since needs a time zone, e.g. 2026-11-20T00:00:00Z")
    try:
        since = to_iso(body.since)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise invalid("since", "out_of_range", "since is outside years 1 to 9999 in UTC") from None
    caller, _ = _owned_webhook(request, webhook_id)
    conn = db(request)
    with transaction(conn):
        count = deliveries.redeliver(conn, caller.org_id, webhook_id, since=since)
        webhook = store.get_webhook(conn, caller.org_id, webhook_id)
    return json_response({"data": {"webhook": webhook, "requeued": count}})


# ---------------------------------------------------------------- validation


def _valid_events(events: list[str], field: str = "events") -> list[str]:
    if not events:
        raise invalid(field, "empty", "events must name at least one event")
    unknown = sorted({name for name in events if name not in EVENTS})
    if unknown:
        raise ApiError(
            400,
            "invalid_request",
            f"Unknown event name(s): {', '.join(unknown)}",
            {"field": field, "reason": "unknown_event", "unknown": unknown, "allowed": list(EVENTS)},
        )
    return list(dict.fromkeys(events))


def _valid_url(url: str, config: WebhookConfig) -> str:
    try:  # the length is checked by the Url type
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise invalid("url", "invalid_url", "url must be an absolute http:// or https:// URL")
    if parsed.userinfo:
        raise invalid("url", "invalid_url", "url must not carry credentials; authenticate with the signature")
    if not config.allow_private and _obviously_private(parsed.host):
        raise _private_address(parsed.host)
    return url


def _private_address(host: str) -> ApiError:
    return invalid("url", "private_address",
                   f"{host} is not a public address; receivers on loopback, private and link-local addresses "
                   "are refused unless the service runs with COMMOPS_SERVICE_WEBHOOK_ALLOW_PRIVATE=true")


def _obviously_private(host: str) -> bool:
    """Literal IPs in any form a resolver accepts (127.0.0.1, 127.1, 2130706433, 0x7f.1,
    0177.0.0.1, ::ffff:127.0.0.1) and localhost, caught at registration; every host is
    checked again, on the address actually connected to, at delivery."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return not is_public(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    if all(part and (part.isdigit() or part.startswith("0x")) for part in host.split(".")):
        try:  # the numeric IPv4 forms of inet_aton, which getaddrinfo also accepts
            return not is_public(socket.inet_ntoa(socket.inet_aton(host)))
        except OSError:
            return False
    return False


def _valid_secret(secret: str) -> str:
    if len(secret) < MIN_SECRET_LENGTH:  # the Secret type checks the upper bound
        raise invalid(
            "secret",
            "invalid_length",
            f"secret must be {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters; omit it to get a generated one",
        )
    return secret


# ---------------------------------------------------------------- scopes and lookups


def _scopes_for(events: Iterable[str]) -> set[str]:
    return {EVENT_GROUP_SCOPES[name.split(".", 1)[0]] for name in events}


def _require_event_scopes(request: Request, events: Iterable[str]) -> auth.Principal:
    caller = auth.principal(request)
    for scope in sorted(_scopes_for(events)):
        auth.require_scope(request, scope)
    return caller


def _owned_webhook(
    request: Request, webhook_id: str, extra_events: Iterable[str] = ()
) -> tuple[auth.Principal, dict[str, Any]]:
    """The caller's webhook (404 for another organization's), checking the scopes it needs."""
    caller = auth.principal(request)
    try:
        webhook = store.get_webhook(db(request), caller.org_id, webhook_id)
    except store.WebhookNotFound:
        raise not_found("webhook", webhook_id) from None
    _require_event_scopes(request, [*webhook["events"], *extra_events])
    return caller, webhook


def _test_target(request: Request, webhook_id: str, event: str) -> tuple[auth.Principal, dict[str, Any]]:
    """The caller and the webhook's url and secret, checking the scopes of its events and of `event`."""
    caller, _ = _owned_webhook(request, webhook_id, extra_events=[event])
    return caller, store.get_webhook_target(db(request), caller.org_id, webhook_id)


# ---------------------------------------------------------------- plumbing


def _config(request: Request) -> WebhookConfig:
    config = getattr(request.app.state, "webhook_config", None)
    if config is None:
        config = request.app.state.webhook_config = WebhookConfig.from_settings(request.app.state.settings)
    return config

