"""The HTTP face of the spec server (Starlette): the four list endpoints, the KOL detail, auth, errors, headers.

Parameter checking follows spec part 8 (page >= 1, 1 <= per_page <= 100, order asc|desc) and answers
400 invalid_request with details.field; the error envelope is spec part 7 everywhere, 401 and 404 included.
"""

from __future__ import annotations

import time
from email.utils import format_datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.spec_server.state import SORT_FIELDS, SpecState

RATE_LIMIT = 100_000  # generous: never 429


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or {}


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse({"error": {"code": error.code, "message": error.message, "details": error.details}}, error.status)


def _invalid(field: str, message: str, reason: str = "invalid") -> ApiError:
    return ApiError(400, "invalid_request", message, {"field": field, "reason": reason})


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int | None) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _invalid(name, f"{name} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise _invalid(name, f"{name} must be {bound}, got {value}")
    return value


def _bool_param(query: dict[str, str], name: str, default: bool) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise _invalid(name, f"{name} must be true or false, got {raw!r}")


def create_app(state: SpecState, api_key: str) -> ASGIApp:
    def authorize(request: Request) -> None:
        if request.headers.get("authorization") != f"Bearer {api_key}":
            raise ApiError(401, "unauthorized", "missing or invalid API key: send Authorization: Bearer <API_KEY>")

    def list_endpoint(resource: str):
        def endpoint(request: Request) -> JSONResponse:
            try:
                authorize(request)
                if state.latency:
                    time.sleep(state.latency)  # a slow server; Starlette runs sync endpoints in a thread pool
                query = dict(request.query_params)
                page = _int_param(query, "page", 1, 1, None)
                per_page = _int_param(query, "per_page", 20, 1, 100)
                allowed = SORT_FIELDS[resource]
                sort = query.get("sort", allowed[0])
                if sort not in allowed:
                    raise _invalid("sort", f"sort must be one of {', '.join(allowed)}, got {sort!r}")
                order = query.get("order", "desc")
                if order not in ("asc", "desc"):
                    raise _invalid("order", f"order must be asc or desc, got {order!r}")
                archived = None
                if resource == "kols":
                    archived = _bool_param(query, "is_archived", False)
                    query["is_archived"] = "true" if archived else "false"  # hooks match the defaulted value
                body = state.list_page(resource, query, page=page, per_page=per_page, sort=sort, order=order, archived=archived)
                return JSONResponse(body)
            except ApiError as error:
                return _error_response(error)

        return endpoint

    def kol_detail(request: Request) -> JSONResponse:
        try:
            authorize(request)
            if state.latency:
                time.sleep(state.latency)
            kol_id = request.path_params["kol_id"]
            if (status := state.detail_fault(kol_id)) is not None:
                raise ApiError(status, "invalid_request", f"KOL {kol_id} cannot be read now", {"field": "id", "reason": "invalid"})
            data = state.detail(kol_id)
            if data is None:
                raise ApiError(404, "not_found", f"no KOL {kol_id}")
            return JSONResponse({"data": data})
        except ApiError as error:
            return _error_response(error)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(ApiError(404, "not_found", f"no route {request.method} {request.url.path}"))

    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(ApiError(405, "method_not_allowed", f"{request.method} is not supported on {request.url.path}"))

    routes = [Route(f"/v1/{name}", list_endpoint(name), methods=["GET"]) for name in SORT_FIELDS]
    routes.append(Route("/v1/kols/{kol_id}", kol_detail, methods=["GET"]))
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed})
    return _ServerHeaders(app, state)


class _ServerHeaders:
    """Logs each request and adds, to every response, a Date from the server's (skewable) clock and
    generous X-RateLimit-* headers (pure ASGI, so 404s and errors carry them too)."""

    def __init__(self, app: ASGIApp, state: SpecState):
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        self.state.log_request(request.url.path, dict(request.query_params))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                now = self.state.now()
                headers = list(message.get("headers", []))
                headers += [
                    (b"date", format_datetime(now.replace(microsecond=0), usegmt=True).encode()),
                    (b"x-ratelimit-limit", str(RATE_LIMIT).encode()),
                    (b"x-ratelimit-remaining", str(RATE_LIMIT - 1).encode()),
                    (b"x-ratelimit-reset", str(60 - now.second).encode()),  # seconds to the next minute
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
