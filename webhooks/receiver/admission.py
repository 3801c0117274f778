"""The bytes the receiver holds for bodies it has not verified yet, all requests together, under a cap.

Anyone can send a request with a well-formed signature header; until the body has been read and its
HMAC checked, its bytes are a stranger's. Their sum is capped (COMMOPS_WEBHOOK_UNVERIFIED_BYTES), not
the number of requests: many small deliveries at once pass, a few large unverified bodies cannot grow
the receiver without bound. Used on the event loop only, so plain integers suffice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class OverCap(Exception):
    """Holding more bytes would pass the cap: the request is answered 503 with Retry-After."""


class UnverifiedBytes:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0

    def has_room_for(self, size: int) -> bool:
        return self.held + size <= self.cap

    @contextmanager
    def hold(self) -> Iterator[Hold]:
        """A request's share, given back when the block ends (or earlier, by `release`)."""
        held = Hold(self)
        try:
            yield held
        finally:
            held.release()


class Hold:
    """The bytes one request holds."""

    def __init__(self, pool: UnverifiedBytes) -> None:
        self._pool = pool
        self.size = 0

    def grow_to(self, size: int) -> None:
        """Hold `size` bytes in all; OverCap (nothing more held) when the pool has no room for them."""
        extra = size - self.size
        if extra <= 0:
            return
        if not self._pool.has_room_for(extra):
            raise OverCap
        self._pool.held += extra
        self.size = size

    def release(self) -> None:
        self._pool.held -= self.size
        self.size = 0
