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


# NAT64 (RFC 6052): the well-known prefix carries an IPv4 address in its last 32 bits. The local-use
# prefix (RFC 8215) is an operator's own translator, and where the IPv4 address sits in it depends on
# the prefix length the operator chose: a receiver is never reached through it.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated (RFC 4291), still routed by some stacks


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries: IPv4-mapped, IPv4-compatible, NAT64 (well-known
    prefix), 6to4, Teredo (server and client); () when it carries none."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return ip.teredo
    if ip in NAT64_WELL_KNOWN or ip in IPV4_COMPATIBLE:
        return (ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF),)
    return ()


def is_public(address: str) -> bool:
    """Whether deliveries may go to `address`: a global unicast address. An IPv6 address carrying an
    IPv4 address is judged by the IPv4 address inside, which is where its packets end up."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL_USE:
            return False
        inner = embedded_ipv4(ip)
        if inner:
            return all(_global_unicast(v4) for v4 in inner)
    return _global_unicast(ip)


def _global_unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
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
