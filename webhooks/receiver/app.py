"""The receiver's ASGI app (Starlette): POST /webhooks/commops and GET /healthz.

A delivery is answered, in this order:
- 401 when `x-service-signature` is missing, sent twice or not 64 lower-case hex characters: told
  from the headers, before any byte of the body is read;
- 413 when Content-Length or the bytes read exceed the body cap (nothing more is buffered; the
  rest of a body up to twice the cap is discarded, so clients that send before they read see it);
- 503 with Retry-After when the bytes of bodies read but not verified yet, all requests together,
  would pass their cap (webhooks/receiver/admission.py); 408 when the body takes longer than
  BODY_SECONDS to arrive (a stalled sender holds none of that budget for long);
- 401 when the signature matches none of the configured secrets;
- 400 when the body can never be an event (resources/inbox/envelope.py): not a JSON object,
  nested too deeply to read, `id` or `event` not a non-empty string, `created_at` not an ISO 8601
  timestamp (one without zone designator is read as UTC), `data` not an object; the message names
  the field;
- 401 when every secret that matched is bound to an organization other than the event's
  `organization_id` (one organization's service cannot write another's events);
- 503 when the inbox commit fails (the service retries);
- 200 once the event is committed durably to the inbox, also for an id already stored
  (`"duplicate": true`, stored once). Unknown event names are stored with known_event=0.
Accepted and refused deliveries and reloads of the secrets file are logged as counts, at most one
line per interval each (delivery_log.py); secrets, signatures and bodies never are.
"""

from __future__ import annotations

import asyncio
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
from webhooks.receiver.admission import Hold, OverCap, UnverifiedBytes
from privacy.suppression import WatchedSuppression
from webhooks.receiver.committer import GroupCommitter, InboxUnavailable
from webhooks.receiver.delivery_log import accepted_log, refused_log
from resources.inbox.envelope import InvalidEnvelope, parse_envelope
from resources.inbox import Inbox
from webhooks.receiver.settings import ReceiverSettings
from webhooks.signatures import SecretRing, may_write, signers, well_formed

log = logging.getLogger("webhooks.receiver")

WEBHOOK_PATH = "/webhooks/commops"
HEALTH_PATH = "/healthz"
_SIGNATURE_HEADER = WEBHOOK_SIGNATURE_HEADER.encode()
# A body must arrive within this; the service gives up on an attempt after 10 s by default.
BODY_SECONDS = 30.0
RETRY_AFTER_SECONDS = 5  # past the cap on unverified bytes: held bytes are verified or refused by then


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _signature_header(request: Request) -> bytes | None:
    """The raw header bytes; None when absent, sent more than once (ambiguous) or not 64 lower-case hex."""
    values = [value for name, value in request.scope["headers"] if name.lower() == _SIGNATURE_HEADER]
    return values[0] if len(values) == 1 and well_formed(values[0]) else None


def _declared_length(request: Request) -> int | None:
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.strip().isdigit() else None


async def _read_capped(request: Request, cap: int, hold: Hold) -> bytes | None:
    """The body, or None as soon as it is longer than `cap` (nothing beyond is buffered); every byte
    read is held in `hold` (OverCap when the unverified bytes of all requests would pass their cap)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            return None
        hold.grow_to(len(body))
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
    writer = committer or GroupCommitter(Inbox(settings.inbox_location),
                                         suppression=WatchedSuppression(settings.data_dir, settings.inbox_location))
    cap = settings.webhook_max_body_bytes
    unverified = UnverifiedBytes(settings.unverified_bytes)
    accepted, refused = accepted_log(), refused_log()

    async def receive_event(request: Request) -> Response:
        def refuse(status: int, code: str, message: str, reason: str | None = None, **headers: str) -> Response:
            refused.count(reason or code, request.client.host if request.client else None)
            response = _error(status, code, message)
            response.headers.update(headers)
            return response

        def busy() -> Response:
            return refuse(503, "receiver_busy", "too many bytes of unverified bodies in flight; retry later",
                          **{"retry-after": str(RETRY_AFTER_SECONDS)})

        def too_large() -> Response:  # closed once LingeringClose has drained what it may
            return refuse(413, "payload_too_large", f"bodies above {cap} bytes are refused", connection="close")

        header = _signature_header(request)
        if header is None:
            return refuse(401, "invalid_signature", f"missing or malformed {WEBHOOK_SIGNATURE_HEADER} "
                          "(64 lower-case hex characters, sent once)", reason="no_signature")
        declared = _declared_length(request)
        if declared is not None and declared > cap:
            return too_large()
        if not unverified.has_room_for(declared or 0):
            return busy()
        with unverified.hold() as hold:
            try:
                async with asyncio.timeout(BODY_SECONDS):
                    body = await _read_capped(request, cap, hold)
            except ClientDisconnect:
                return Response(status_code=400)
            except TimeoutError:
                return refuse(408, "request_timeout", f"the body did not arrive within {BODY_SECONDS:.0f} s",
                              connection="close")
            except OverCap:
                return busy()
            if body is None:
                return too_large()
            signed_by = signers(body, header, ring.current())
        if not signed_by:
            return refuse(401, "invalid_signature", f"wrong {WEBHOOK_SIGNATURE_HEADER}")
        try:
            envelope = parse_envelope(body)
        except InvalidEnvelope as exc:
            return refuse(400, "invalid_envelope", str(exc), reason=f"invalid_envelope ({exc.field or 'body'})")
        if not may_write(signed_by, envelope.organization_id):
            return refuse(401, "wrong_organization", "the secret that signed this event is bound to another "
                          "organization than the event's organization_id")
        try:
            new = await writer.submit(body, envelope)
        except InboxUnavailable:
            return _error(503, "inbox_unavailable", "the event could not be stored; retry later")
        accepted.count("stored" if new else "duplicates")
        return JSONResponse({"id": envelope.id, "duplicate": not new})

    async def health(request: Request) -> Response:
        ok = writer.alive
        body = {"status": "ok" if ok else "inbox writer stopped", "secrets": len(ring),
                "unverified_bytes": unverified.held, "refused": dict(refused.totals)}
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
            refused.flush()

    return Starlette(
        routes=[
            Route(WEBHOOK_PATH, receive_event, methods=["POST"]),
            Route(HEALTH_PATH, health, methods=["GET"]),
        ],
        # A 413 sent before a body of up to twice the cap was read drains the rest: every client reads it.
        middleware=[Middleware(LingeringClose, drain_up_to=2 * cap)],
        lifespan=lifespan,
    )
