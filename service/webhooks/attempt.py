"""One delivery attempt: POST the exact stored bytes, under an overall deadline."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import ssl
import sys
import time
from datetime import UTC, datetime

import httpcore
import httpx

from service.store.deliveries import Outcome
from service.webhooks.config import WebhookConfig
from service.webhooks.safety import AddressRefused, CheckedNetworkBackend
from service.webhooks.signing import delivery_headers

_EXCERPT_CHARS = 1024

# httpcore tries `import sniffio` (optional) on every request; when it is not installed the
# failed import searches sys.path each time, about a sixth of the worker's CPU. Record the
# absence once so the import fails at once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[assignment]



def make_client(config: WebhookConfig) -> httpx.AsyncClient:
    """A client whose connections go only where the address policy allows; no redirects, no proxies."""
    transport = httpx.AsyncHTTPTransport(retries=0)
    # httpx takes no network backend argument; its pool is rebuilt with the checking one.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=_ssl_context(),
        max_connections=config.per_webhook_concurrency,
        max_keepalive_connections=config.per_webhook_concurrency,
        keepalive_expiry=30.0,
        network_backend=CheckedNetworkBackend(config.allow_private),
    )
    timeout = httpx.Timeout(config.attempt_timeout_seconds, connect=config.connect_timeout_seconds)
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Certificate verification on, loaded once (loading the CA bundle costs ~80 ms)."""
    return httpx.create_ssl_context()


async def attempt(
    client: httpx.AsyncClient, config: WebhookConfig, url: str, secret: str, message_id: str, body: bytes
) -> Outcome:
    """POST `body` to `url`; any non-2xx answer, timeout or connection error is a failed outcome."""
    started_at = datetime.now(UTC)
    clock = time.perf_counter()
    headers = delivery_headers(secret, message_id, int(started_at.timestamp()), body)
    status_code: int | None = None
    excerpt: str | None = None
    error: str | None = None
    try:
        async with asyncio.timeout(config.attempt_timeout_seconds):
            async with client.stream("POST", url, content=body, headers=headers) as response:
                status_code = response.status_code
                excerpt = await _read_capped(response, config.max_response_bytes)
        if 300 <= status_code < 400:
            error = f"redirect to {response.headers.get('location', '?')} not followed"
    except TimeoutError:
        error = f"timeout: no complete answer within {config.attempt_timeout_seconds:g} s"
    except httpx.TimeoutException as exc:
        error = f"timeout: {type(exc).__name__}"
    except httpx.TransportError as exc:
        error = _transport_error(exc)
    except (httpx.HTTPError, ValueError, UnicodeError) as exc:  # e.g. a URL httpx cannot send to
        error = f"request_error: {type(exc).__name__}: {exc}"
    latency_ms = (time.perf_counter() - clock) * 1000
    return Outcome(started_at, status_code, error, latency_ms, excerpt)


async def _read_capped(response: httpx.Response, limit: int) -> str:
    """Read the answer up to `limit` bytes (so the connection can be reused); keep only its start."""
    head, seen = bytearray(), 0
    async for chunk in response.aiter_raw():
        if len(head) < _EXCERPT_CHARS:
            head += chunk[: _EXCERPT_CHARS - len(head)]
        seen += len(chunk)
        if seen >= limit:
            break
    return bytes(head).decode("utf-8", "replace")


def _transport_error(exc: httpx.TransportError) -> str:
    cause: BaseException | None = exc
    while cause is not None:  # httpx re-raises httpcore errors under its own classes
        if isinstance(cause, AddressRefused):
            return f"address_refused: {cause}"
        cause = cause.__cause__
    detail = f": {exc}" if str(exc) else ""
    return f"connection_error: {type(exc).__name__}{detail}"
