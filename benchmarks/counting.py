"""The service in a child process, counting every request it receives (server side).

`SERVE` is run as `python -c SERVE DB SETTINGS_JSON`: it wraps the service's ASGI app (outermost,
before the rate-limit gate and fault injection) in `CountingMiddleware`, prints the base URL and
serves until its stdin closes. `GET /__bench/counts[?reset=1]` answers the counts since the last
reset: requests, per status ("none": the connection was dropped before any answer), 429s per
server rate window (the X-RateLimit-Reset value), and is itself never counted. Counting on the server
is the one count that means the same for both tools: retries, dropped and truncated attempts included.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

COUNTS_PATH = "/__bench/counts"


class _CountingSend:
    """Wraps the server's send, recording the status and rate window; exposes the wrapped
    send's transport and disconnected flag, which the fault injector uses to cut connections."""

    def __init__(self, send):
        self._send = send
        self.status: int | None = None
        self.reset: str | None = None

    @property
    def transport(self):
        return getattr(getattr(self._send, "__self__", None), "transport", None)

    @property
    def disconnected(self):
        return getattr(getattr(self._send, "__self__", None), "disconnected", True)

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status = message["status"]
            for name, value in message.get("headers", []):
                if name.lower() == b"x-ratelimit-reset":
                    self.reset = value.decode()
        await self._send(message)


class CountingMiddleware:
    def __init__(self, app):
        self.app = app
        self._lock = threading.Lock()
        self._reset()

    def _reset(self):
        self.counts: Counter[str] = Counter()
        self.windows_ok: Counter[str] = Counter()
        self.windows_429: Counter[str] = Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == COUNTS_PATH:
            with self._lock:
                body = json.dumps({"counts": dict(self.counts), "windows_ok": dict(self.windows_ok),
                                   "windows_429": dict(self.windows_429)}).encode()
                if b"reset=1" in scope.get("query_string", b""):
                    self._reset()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        wrapped = _CountingSend(send)
        try:
            await self.app(scope, receive, wrapped.send)
        finally:
            status = str(wrapped.status or "none")
            with self._lock:
                self.counts["requests"] += 1
                self.counts[status] += 1
                if wrapped.reset is not None:
                    (self.windows_429 if status == "429" else self.windows_ok)[wrapped.reset] += 1


SERVE = """
import json, sys
import service.server as served
from benchmarks.counting import CountingMiddleware
from service.settings import ServiceSettings
create_app = served.create_app
served.create_app = lambda settings: CountingMiddleware(create_app(settings))
server = served.ServiceServer(ServiceSettings(db=sys.argv[1], **json.loads(sys.argv[2]))).start()
print(server.base_url, flush=True)
sys.stdin.read()
server.stop()
"""
