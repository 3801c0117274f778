"""The receiver's ASGI app (Starlette): POST /webhooks/commops and GET /healthz.

A delivery is answered, in this order:
- 413 when Content-Length or the bytes read exceed the body cap (nothing more is buffered; the
  rest of a body up to twice the cap is discarded, so clients that send before they read see it);
- 401 when `x-service-signature` is missing, not 64 lower-case hex characters, or matches
  none of the configured secrets;
- 400 when the body can never be an event (webhooks/receiver/envelope.py): not a JSON object,
  `id` or `event` not a non-empty string, `created_at` not an ISO 8601 timestamp (one without zone
  designator is read as UTC), `data` not an object; the message names the field;
- 503 when the inbox commit fails (the service retries);
- 200 once the event is committed durably to the inbox, also for an id already stored
  (`"duplicate": true`, stored once). Unknown event names are stored with known_event=0.
Accepted deliveries and reloads of the secrets file are logged as counts; secrets, signatures and
bodies never are.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from commops_spec.constants import WEBHOOK_SIGNATURE_HEADER
from http_serving.lingering import LingeringClose
from webhooks.receiver.committer import GroupCommitter, InboxUnavailable
from webhooks.receiver.delivery_log import DeliveryLog
from webhooks.receiver.envelope import InvalidEnvelope, parse_envelope
from webhooks.inbox import Inbox
from webhooks.receiver.settings import ReceiverSettings
from webhooks.signatures import SecretRing, verify

log = logging.getLogger("webhooks.receiver")

WEBHOOK_PATH = "/webhooks/commops"
HEALTH_PATH = "/healthz"
_SIGNATURE_HEADER = WEBHOOK_SIGNATURE_HEADER.encode()


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _signature_header(request: Request) -> bytes | None:
    """The raw header bytes; None when absent or sent more than once (ambiguous)."""
    values = [value for name, value in request.scope["headers"] if name.lower() == _SIGNATURE_HEADER]
    return values[0] if len(values) == 1 else None


async def _read_capped(request: Request, cap: int) -> bytes | None:
    """The body, or None as soon as it is longer than `cap` (nothing beyond is buffered)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > cap:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            return None
    return bytes(body)


def create_app(
    settings: ReceiverSettings | None = None,
    *,
    secrets: SecretRing | None = None,
    committer: Any = None,
) -> Starlette:
    """The receiver for `settings` (default: from the environment).

    `secrets` defaults to COMMOPS_WEBHOOK_SECRETS plus the secrets file; `committer` (an
    object with `async submit(raw, envelope: Envelope) -> bool`, `start()`, `stop()`, `alive`) defaults
    to a GroupCommitter over the inbox (COMMOPS_INBOX_URL, else the file under COMMOPS_DATA_DIR).
    """
    settings = settings or ReceiverSettings()
    ring = secrets or SecretRing(settings.secrets, settings.secrets_file)
    writer = committer or GroupCommitter(Inbox(settings.inbox_location))
    cap = settings.webhook_max_body_bytes
    accepted = DeliveryLog()

    async def receive_event(request: Request) -> Response:
        try:
            body = await _read_capped(request, cap)
        except ClientDisconnect:
            return Response(status_code=400)
        if body is None:
            too_large = _error(413, "payload_too_large", f"bodies above {cap} bytes are refused")
            too_large.headers["connection"] = "close"  # closed once LingeringClose has drained what it may
            return too_large
        if not verify(body, _signature_header(request), ring.current()):
            client = request.client.host if request.client else "?"
            log.warning("refused a delivery from %s: missing or wrong %s", client, WEBHOOK_SIGNATURE_HEADER)
            return _error(401, "invalid_signature", f"missing or wrong {WEBHOOK_SIGNATURE_HEADER}")
        try:
            envelope = parse_envelope(body)
        except InvalidEnvelope as exc:
            log.warning("refused a signed delivery (400): %s", exc)
            return _error(400, "invalid_envelope", str(exc))
        try:
            new = await writer.submit(body, envelope)
        except InboxUnavailable:
            return _error(503, "inbox_unavailable", "the event could not be stored; retry later")
        accepted.accepted(stored=new)
        return JSONResponse({"id": envelope.id, "duplicate": not new})

    async def health(request: Request) -> Response:
        ok = writer.alive
        body = {"status": "ok" if ok else "inbox writer stopped", "secrets": len(ring)}
        if ring.last_error:
            body["secrets_file_error"] = ring.last_error
        return JSONResponse(body, status_code=200 if ok else 503)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        writer.start()
        try:
            yield
        finally:
            writer.stop()
            accepted.flush()

    return Starlette(
        routes=[
            Route(WEBHOOK_PATH, receive_event, methods=["POST"]),
            Route(HEALTH_PATH, health, methods=["GET"]),
        ],
        # A 413 sent before a body of up to twice the cap was read drains the rest: every client reads it.
        middleware=[Middleware(LingeringClose, drain_up_to=2 * cap)],
        lifespan=lifespan,
    )
