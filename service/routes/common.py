"""What every router uses: the database, JSON responses, bodies, documented errors."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, TypeVar

from fastapi import Request
from pydantic import AfterValidator, BaseModel, ValidationError
from pydantic_core import PydanticCustomError
from starlette.responses import Response

from service.errors import ApiError, from_validation_errors
from service.routes import schemas
from service.settings import ServiceSettings

M = TypeVar("M", bound=BaseModel)

# Request body models declared with request_body(); the app puts them in the OpenAPI components.
BODY_MODELS: dict[str, type[BaseModel]] = {}


def db(request: Request) -> sqlite3.Connection:
    return request.app.state.pool.get()


def settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status_code=status, media_type="application/json")


def list_response(items: list[dict[str, Any]], query: dict[str, Any], total: int, **more: Any) -> Response:
    """One page of items; meta holds the query's page and per_page, the total, and `more`."""
    meta = {"page": query["page"], "per_page": query["per_page"], "total": total, **more}
    return json_response({"data": items, "meta": meta})


def drift(request: Request, item: dict[str, Any], nested: dict[str, Any] | None = None) -> dict[str, Any]:
    """With extra_fields on, add unknown fields (schema drift) to an item in place."""
    if settings(request).extra_fields:
        item["x_added_field"] = "drift"
        if nested is not None:
            nested["x_geo"] = {"lat": 0.0, "lon": 0.0}
    return item


async def read_body(request: Request, model: type[M]) -> M:
    """The JSON body validated against `model`; 415/400 envelopes otherwise."""
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise ApiError(415, "unsupported_media_type",
                       f"Send the body as JSON with Content-Type: application/json (got {content_type or 'none'})",
                       {"content_type": content_type})
    raw = await _read_capped(request, settings(request).max_body_bytes)
    if not raw.strip():
        raise ApiError(400, "invalid_request", "The request body is empty; send a JSON object",
                       {"field": "body", "reason": "missing"})
    try:
        body = model.model_validate_json(raw)
    except ValidationError as exc:
        raise from_validation_errors(exc.errors(include_url=False)) from None
    _reject_nul(body.model_dump(), ())
    return body


async def _read_capped(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes: from
    Content-Length before reading anything, else while reading (the rest is never read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"The request body exceeds {limit:,} bytes",
                    {"limit_bytes": limit}, {"Connection": "close"})


def _reject_nul(value: Any, path: tuple[Any, ...]) -> None:
    """400 invalid_character for the first string of the body holding U+0000 (stored, it
    would be cut short by C-string consumers and hides text from search)."""
    if isinstance(value, str):
        if "\x00" in value:
            field = ".".join(str(part) for part in path) or "body"
            raise ApiError(400, "invalid_request", f"{field} contains a NUL character (\\u0000); remove it",
                           {"field": field, "reason": "invalid_character"})
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_nul(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_nul(item, (*path, index))


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must contain a character other than white space")
    return value


# For required names and labels: white space alone is refused (400 reason `blank`).
NotBlank = AfterValidator(_not_blank)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for the error statuses an operation can answer."""
    texts = {
        400: "Invalid parameters or body (invalid_request, invalid_json)",
        401: "Missing, unknown or revoked API key (unauthorized)",
        403: "The key lacks the operation's scope (insufficient_scope)",
        404: "No such resource in the organization (not_found)",
        409: "A KOL with this email already exists (duplicate_email)",
        413: "The body exceeds the size limit (payload_too_large)",
        415: "The body is not sent as application/json (unsupported_media_type)",
        429: "Rate limit (rate_limited) or plan KOL limit (kol_limit_reached) exceeded",
        500: "Internal error (internal_error); reveals nothing",
    }
    out: dict[int | str, dict[str, Any]] = {}
    for status in (*statuses, 401, 429, 500):
        out[status] = {"model": schemas.ErrorEnvelope, "description": texts[status]}
    if 415 in statuses:  # every operation that reads a body
        out[413] = {"model": schemas.ErrorEnvelope, "description": texts[413]}
    return out


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """openapi_extra declaring `model` as the JSON request body (hoisted into components by app)."""
    BODY_MODELS[model.__name__] = model
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        },
    }
