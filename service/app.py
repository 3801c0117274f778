"""The FastAPI application: routers, the request gate, errors, OpenAPI, background hooks.

Background work (webhook delivery, the activity simulator) plugs in without this
module knowing it: each optional module in PLUGINS that exists and defines
`install(app, settings)` is called by create_app; install appends callables to
`app.state.on_startup` / `app.state.on_shutdown`. The lifespan runs the startup hooks
in order when the server starts and the shutdown hooks in reverse order when it
stops. A hook takes the app and may be sync or async.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from http_serving.lingering import LingeringClose
from service import errors
from service.faults import FaultInjector
from service.ratelimit import RequestGate
from service.routes import campaigns, kols, products, signals
from service.routes.common import BODY_MODELS
from service.settings import ServiceSettings
from service.store.db import ConnectionPool, init_db

PLUGINS = ("service.webhooks", "service.simulator")
RATE_HEADERS = {
    "X-RateLimit-Limit": "Requests allowed per minute window by the plan",
    "X-RateLimit-Remaining": "Requests left in the current minute window (or day, when lower)",
    "X-RateLimit-Reset": "Unix epoch seconds at which the current minute window resets",
}

Hook = Callable[[FastAPI], Any]


class ServiceApp(FastAPI):
    """FastAPI with the request gate (auth, rate limits) and fault injection wrapped
    around the whole stack, so that even a framework-level 500 carries the rate-limit
    headers and faults can cut the connection; a 413 sent before a body of up to twice
    max_body_bytes was read drains the rest of it, so every client reads the 413."""

    def build_middleware_stack(self):
        stack = super().build_middleware_stack()
        settings: ServiceSettings = self.state.settings
        if settings.faults_enabled:
            stack = FaultInjector(stack, settings)
        stack = LingeringClose(stack, drain_up_to=2 * settings.max_body_bytes)
        return RequestGate(stack, settings, self.state.pool)  # outermost: it keeps the server's own send


@asynccontextmanager
async def _lifespan(app: FastAPI):
    for hook in app.state.on_startup:
        await _run(hook, app)
    try:
        yield
    finally:
        for hook in reversed(app.state.on_shutdown):
            await _run(hook, app)
        app.state.pool.close()


async def _run(hook: Hook, app: FastAPI) -> None:
    result = hook(app)
    if inspect.isawaitable(result):
        await result


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    init_db(settings.db)
    app = ServiceApp(
        title="Commercial Operations Service",
        version="1.0.0",
        description="The spec's API (KOLs, campaigns, products, signals), run locally. "
        "Authenticate with Authorization: Bearer <key>.",
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.pool = ConnectionPool(settings.db)
    app.state.on_startup = []
    app.state.on_shutdown = []
    errors.install(app)
    for module in (kols, campaigns, products, signals):
        app.include_router(module.router)
    if importlib.util.find_spec("service.routes.webhooks") is not None:
        app.include_router(importlib.import_module("service.routes.webhooks").router)
    for name in PLUGINS:
        if importlib.util.find_spec(name) is not None:
            install = getattr(importlib.import_module(name), "install", None)
            if install is not None:
                install(app, settings)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document corrected to the real behaviour: bearer auth, JSON request
    bodies, error envelopes for 4xx/5xx, rate-limit headers, no 422."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    models = components.setdefault("schemas", {})
    for model in BODY_MODELS.values():
        body = model.model_json_schema(ref_template="#/components/schemas/{model}")
        models.update(body.pop("$defs", {}))
        models[model.__name__] = body
    for name in ("HTTPValidationError", "ValidationError"):
        models.pop(name, None)
    components["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    schema["security"] = [{"bearerAuth": []}]
    header_docs = {name: {"description": text, "required": True, "schema": {"type": "integer"}} for name, text in RATE_HEADERS.items()}
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            for status, response in responses.items():
                response["headers"] = dict(header_docs)
                if status == "429":
                    response["headers"]["Retry-After"] = {"description": "Seconds to wait", "schema": {"type": "integer"}}
    app.openapi_schema = schema
    return schema
