"""The one place that turns every failure into the spec's error envelope (part 7).

{"error": {"code": ..., "message": ..., "details": {...}}}. Validation problems are
400 invalid_request with details.field (dotted path) and details.reason; the
framework's 422 shape never leaves the service; a 500 reveals nothing internal.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("service")

# pydantic error types -> the short reasons clients see in details.reason
_REASONS = {
    "missing": "missing",
    "extra_forbidden": "unknown_field",
    "literal_error": "invalid_choice",
    "enum": "invalid_choice",
    "string_too_short": "too_short",
    "string_too_long": "too_long",
    "too_short": "too_short",
    "too_long": "too_long",
    "string_pattern_mismatch": "invalid_format",
    "value_error": "invalid_value",
    "timezone_aware": "timezone_required",
    "blank": "blank",
}


class ApiError(Exception):
    """An error answered with the envelope; raise it from anywhere in a request."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


def invalid(field: str, reason: str, message: str, **extra: Any) -> ApiError:
    """400 invalid_request about one field or query parameter."""
    return ApiError(400, "invalid_request", message, {"field": field, "reason": reason, **extra})


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"No {what} with id {ident!r} in this organization", {"id": ident})


def envelope(status: int, code: str, message: str, details: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(exc: ApiError) -> Response:
    return envelope(exc.status, exc.code, exc.message, exc.details, exc.headers)


def from_validation_errors(errors: list[dict[str, Any]], prefix: tuple = ()) -> ApiError:
    """The first pydantic error as 400 invalid_request (or invalid_json for unparsable bodies)."""
    first = errors[0] if errors else {"type": "value_error", "loc": (), "msg": "invalid body"}
    if first.get("type") == "json_invalid":
        return ApiError(400, "invalid_json", "The request body is not valid JSON",
                        {"reason": str(first.get("ctx", {}).get("error", "malformed JSON"))})
    loc = [part for part in (*prefix, *first.get("loc", ())) if part != "body"]
    field = ".".join(str(part) for part in loc) or "body"
    kind = first.get("type", "value_error")
    reason = _REASONS.get(kind) or ("wrong_type" if kind.endswith("_type") or kind.endswith("_parsing") else kind)
    if reason == "missing":
        message = f"Missing required field {field}"
    elif reason == "unknown_field":
        message = f"Unknown field {field}"
    else:
        message = f"Invalid value for {field}: {first.get('msg', 'invalid')}"
    bounds = {name: value for name, value in (first.get("ctx") or {}).items() if name in ("max_length", "min_length")}
    return invalid(field, reason, message, **bounds)


async def _api_error(_: Request, exc: ApiError) -> Response:
    return error_response(exc)


async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
    return error_response(from_validation_errors(list(exc.errors())))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == 404:
        return envelope(404, "not_found", f"No route {request.url.path}", {"path": request.url.path})
    if exc.status_code == 405:
        headers = {"Allow": ", ".join(_allowed_methods(request))}
        return envelope(405, "method_not_allowed", f"Method {request.method} is not allowed on {request.url.path}",
                        {"method": request.method}, headers)
    return envelope(exc.status_code, "http_error", str(exc.detail), {})


def _allowed_methods(request: Request) -> list[str]:
    """Every method routed for the path (Starlette's own Allow lists only one route's)."""
    from starlette.routing import compile_path

    methods: set[str] = set()
    for path, route_methods in _routes(request.app):
        if compile_path(path)[0].match(request.url.path):
            methods |= route_methods
    return sorted(methods)


def _routes(app: FastAPI) -> list[tuple[str, set[str]]]:
    """(path, methods) of every route, included routers flattened, from the OpenAPI paths."""
    cached = getattr(app.state, "route_methods", None)
    if cached is None:
        cached = [(path, {m.upper() for m in item}) for path, item in app.openapi().get("paths", {}).items()]
        app.state.route_methods = cached
    return cached


async def _unexpected(_: Request, exc: Exception) -> Response:
    log.error("unhandled error: %s", type(exc).__name__, exc_info=exc)
    return internal_error()


def internal_error() -> Response:
    return envelope(500, "internal_error", "Internal server error", {})


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
