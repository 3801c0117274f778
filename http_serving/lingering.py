"""A 413 that every client reads: lingering close, as nginx does it.

A server that refuses a body before reading it and closes the connection leaves the unread bytes
in its socket; the kernel then resets the connection. curl reads the answer while it sends, but
`http.client`, `requests` and `urllib` send the whole body first and see only the reset (a
BrokenPipeError). So after a 413 sent before the body was read, the answer goes out at once and
the rest of the body is read and discarded, within bounds, before the connection closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

LINGER_SECONDS = 30.0  # nginx's lingering_time
LINGER_IDLE_SECONDS = 5.0  # nginx's lingering_timeout: no byte for this long ends the drain


class LingeringClose:
    """ASGI middleware: when `app` answers 413 before the request body has been read to its end,
    send the answer, then read and discard the rest of the body, as long as the body is at most
    `drain_up_to` bytes in all, for at most LINGER_SECONDS (LINGER_IDLE_SECONDS without a byte),
    before completing the response (and closing, as a 413 says `Connection: close`).

    A body declared (Content-Length) longer than `drain_up_to` is not drained, nor one whose client
    waits for `Expect: 100-continue`: neither would be read to its end."""

    def __init__(self, app: Any, drain_up_to: int) -> None:
        self.app = app
        self.drain_up_to = drain_up_to

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        read = 0
        body_done = False
        draining = False

        async def counting_receive() -> dict[str, Any]:
            nonlocal read, body_done
            message = await receive()
            read += len(message.get("body", b""))
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def lingering_send(message: dict[str, Any]) -> None:
            nonlocal draining
            if message["type"] == "http.response.start":
                draining = message["status"] == 413 and not body_done and self._worth_draining(scope)
            elif message["type"] == "http.response.body" and draining and not message.get("more_body", False):
                await send({**message, "more_body": True})  # the answer leaves now
                await _discard(receive, self.drain_up_to - read)
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(scope, counting_receive, lingering_send)

    def _worth_draining(self, scope: dict[str, Any]) -> bool:
        headers = dict(scope.get("headers") or [])
        if headers.get(b"expect", b"").lower() == b"100-continue":
            return False
        declared = headers.get(b"content-length", b"").strip()
        return not declared.isdigit() or int(declared) <= self.drain_up_to


async def _discard(receive: Any, budget: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LINGER_SECONDS
    discarded = 0
    while discarded <= budget:
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), min(LINGER_IDLE_SECONDS, left))
        except TimeoutError:
            return
        if message["type"] != "http.request":
            return
        discarded += len(message.get("body", b""))
        if not message.get("more_body", False):
            return
