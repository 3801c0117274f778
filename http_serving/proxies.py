"""Which peers may say who the client is. uvicorn's proxy headers (X-Forwarded-For, X-Forwarded-Proto)
are honoured only from the addresses an operator names: by default from none, since uvicorn's own
default trusts 127.0.0.1, and any local process could then pick the client address it is counted as."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator


def trusted_proxies(value: str) -> list[str]:
    """The comma-separated IP addresses and networks (or `*`: every peer) of `value`; ValueError, one
    line, for an item that is neither."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or network (e.g. 10.0.0.5,10.1.0.0/16)") from None
    return items


def proxy_options(value: str) -> dict[str, Any]:
    """uvicorn.Config's options honouring proxy headers from the peers `value` names (none when empty)."""
    trusted = trusted_proxies(value)
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or None}


def _checked(value: str) -> str:
    trusted_proxies(value)
    return value


TrustedProxies = Annotated[str, AfterValidator(_checked)]
"""A settings field naming the trusted proxies (the `*_FORWARDED_ALLOW_IPS` variables), checked when read."""
