"""Who may drive the page, and the headers every answer carries.

- A session is a random id in a cookie (HttpOnly, SameSite=Strict, Path=/, Secure over HTTPS) naming a
  server-side record: the user (None until signed in), its CSRF token, its flash messages. Sessions live in
  this process only: a restart signs everyone out.
- One local admin (loopback, no password): each launch makes a token; `/login?token=...` with it opens a
  session as the operating-system user. Another local user cannot read the token (it is printed to the
  terminal of the admin who started the page) and a web page in the admin's browser cannot send the cookie
  (SameSite=Strict) nor read a form's CSRF token.
- Signed-in users (COMMOPS_REVIEW_PASSWORD / COMMOPS_REVIEW_USERS): name and password on `/login`. Password
  guessing is throttled: past SIGN_IN_LIMIT failures in SIGN_IN_WINDOW seconds from one client address, or for
  one name, further attempts from that address or for that name are refused (429) without being checked, until
  the oldest failure is that old.
- Every POST carries the session's CSRF token (form field `csrf`): without it, or with another, 403 and
  nothing is done. An `Origin` header, when sent, must be this page's.
- The Host header must be a name of this server (DNS rebinding: a page of another site whose name resolves
  to 127.0.0.1 reaches the port, but with its own name in Host).
Secrets and tokens are compared in constant time (hmac.compare_digest).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

COOKIE = "commops_review"
MAX_SESSIONS = 2_000  # anonymous sessions are made for every new visitor of /login: bounded, oldest dropped
SIGN_IN_LIMIT = 10  # failed sign-ins per client address, and per name, within SIGN_IN_WINDOW
SIGN_IN_WINDOW = 15 * 60.0
MAX_THROTTLED = 10_000  # addresses and names followed: bounded, the least recently failing dropped
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make browsers send `Origin: null` on our own forms
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def same(given: str | None, expected: str) -> bool:
    """Constant-time equality of two secrets (digests first: no length leaks either)."""
    if given is None:
        return False
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest())


@dataclass
class Session:
    id: str
    csrf: str
    user: str | None
    expires: float
    flashes: list[tuple[str, str]] = field(default_factory=list)  # (kind: ok | refused, message)

    def flash(self, kind: str, message: str) -> None:
        self.flashes.append((kind, message))

    def take_flashes(self) -> list[tuple[str, str]]:
        taken, self.flashes = self.flashes, []
        return taken


class Sessions:
    """The sessions of this process; thread-safe (actions run in worker threads)."""

    def __init__(self, lifetime_seconds: float) -> None:
        self.lifetime = lifetime_seconds
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, user: str | None) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), user, time.time() + self.lifetime)
        with self._lock:
            self._sessions[session.id] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires < time.time():
                del self._sessions[session_id]
                return None
        return session

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


class SignInThrottle:
    """The failed sign-ins of the last SIGN_IN_WINDOW seconds, per client address and per name; thread-safe."""

    def __init__(self, limit: int = SIGN_IN_LIMIT, window: float = SIGN_IN_WINDOW) -> None:
        self.limit, self.window = limit, window
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, address: str, name: str) -> float:
        """Seconds until an attempt from `address` for `name` is checked again (0: now)."""
        now = time.monotonic()
        with self._lock:
            return max(self._wait(key, now) for key in self._keys(address, name))

    def failed(self, address: str, name: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key in self._keys(address, name):
                times = self._failures.pop(key, None) or deque(maxlen=self.limit)
                times.append(now)
                self._failures[key] = times  # the most recent last
            while len(self._failures) > MAX_THROTTLED:
                self._failures.popitem(last=False)

    def succeeded(self, address: str, name: str) -> None:
        with self._lock:
            for key in self._keys(address, name):
                self._failures.pop(key, None)

    @staticmethod
    def _keys(address: str, name: str) -> tuple[str, str]:
        return f"address {address}", f"name {name}"

    def _wait(self, key: str, now: float) -> float:
        times = self._failures.get(key)
        if times is None or len(times) < self.limit:
            return 0.0
        return max(0.0, times[0] + self.window - now)  # the oldest of the last `limit` failures ages out


class Access:
    """How users get a session: the launch's token (one local admin) or their name and password."""

    def __init__(self, accounts: dict[str, str], local_user: str, lifetime_seconds: float) -> None:
        self.accounts = accounts
        self.local_user = local_user
        self.token = secrets.token_urlsafe(32)
        self.sessions = Sessions(lifetime_seconds)
        self.throttle = SignInThrottle()

    @property
    def signs_in(self) -> bool:
        """True: users sign in with a name and password; False: the launch's token opens the page."""
        return bool(self.accounts)

    def by_token(self, token: str | None) -> Session | None:
        if self.signs_in or not same(token, self.token):
            return None
        return self.sessions.open(self.local_user)

    def by_password(self, name: str, password: str) -> Session | None:
        expected = self.accounts.get(name)
        # the comparison runs for unknown names too: how long it takes does not say which names exist
        ok = same(password, expected if expected is not None else secrets.token_urlsafe(16))
        return self.sessions.open(name) if ok and expected is not None else None


class Guard:
    """ASGI middleware: the Host check, then the security headers on every answer."""

    def __init__(self, app: Any, hosts: set[str]) -> None:
        self.app = app
        self.hosts = hosts  # lower-case names without port; "*": any (bound to every interface, users sign in)

    def host_allowed(self, host_header: str) -> bool:
        if "*" in self.hosts:
            return True
        host = host_header.lower()
        if host.startswith("["):
            host = host[1:].partition("]")[0]
        elif host.count(":") == 1:
            host = host.partition(":")[0]
        return host in self.hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.host_allowed(host):
            body = b"This page answers only to its own address (the Host header named another).\n"
            await with_headers({"type": "http.response.start", "status": 421,
                                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                            (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, with_headers)
