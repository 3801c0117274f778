"""Which addresses deliveries may connect to, checked on the address actually connected to.

The network backend resolves the host itself, refuses the connection when any resolved
address is not allowed, and connects to the checked IP: a DNS answer that changes between
a check and the connect (rebinding) cannot slip through. The URL is unchanged, so the Host
header and TLS SNI/certificate checks still use the hostname.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore


class AddressRefused(httpcore.ConnectError):
    """The receiver's host resolves to an address deliveries may not reach."""


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def refused_addresses(addresses: Iterable[str]) -> list[str]:
    return [address for address in addresses if not is_public(address)]


class CheckedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore backend that connects only to addresses the policy allows."""

    def __init__(self, allow_private: bool):
        self.allow_private = allow_private
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP), timeout
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not self.allow_private:
            refused = refused_addresses(addresses)
            if refused:
                raise AddressRefused(
                    f"{host} resolves to non-public address {', '.join(refused)}; "
                    "deliveries to private, loopback and link-local addresses are disabled"
                )
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                last_error = exc
        raise httpcore.ConnectError(f"cannot connect to {host}:{port}: {last_error}")

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not a webhook destination")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)
