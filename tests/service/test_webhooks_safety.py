"""Which receiver addresses production mode refuses, IPv6 forms carrying an IPv4 address included."""

from __future__ import annotations

import ipaddress

import pytest

from service.webhooks.safety import embedded_ipv4, is_public


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",  # loopback
        "10.1.2.3",
        "172.16.5.4",
        "192.168.0.10",  # private
        "169.254.169.254",  # link-local (cloud metadata)
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.1",  # multicast
        "::1",
        "fe80::1%eth0",
        "fc00::1",  # unique local
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:10.0.0.1",
        "64:ff9b::7f00:1",  # NAT64 well-known prefix, 127.0.0.1 inside
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
        "64:ff9b:1::7f00:1",  # NAT64 local-use prefix: the operator's own translator
        "64:ff9b:1::8.8.8.8",  # ... whatever it carries
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a00:5::1",  # 6to4 of 10.0.0.5
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
        "2001:0:a00:1:8000:63bf:f7f7:f7f7",  # Teredo, server 10.0.0.1
        "::127.0.0.1",  # IPv4-compatible
        "::192.168.0.1",
        "::",
    ],
)
def test_non_public_addresses_are_refused(address):
    assert not is_public(address)


@pytest.mark.parametrize("address", [
    "8.8.8.8",
    "140.82.112.3",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",  # IPv4-mapped
    "64:ff9b::808:808",  # NAT64 well-known prefix
    "2002:808:808::1",  # 6to4
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo, server 65.54.227.120, client 8.8.8.8
    "::8.8.8.8",  # IPv4-compatible
])
def test_public_addresses_are_allowed(address):
    assert is_public(address)


@pytest.mark.parametrize(("address", "inside"), [
    ("::ffff:127.0.0.1", ["127.0.0.1"]),
    ("::127.0.0.1", ["127.0.0.1"]),
    ("64:ff9b::7f00:1", ["127.0.0.1"]),
    ("2002:7f00:1::", ["127.0.0.1"]),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", ["65.54.227.120", "127.0.0.1"]),
    ("2001:4860:4860::8888", []),
    ("fe80::1", []),
])
def test_the_ipv4_addresses_an_ipv6_address_carries_are_unwrapped(address, inside):
    assert [str(ip) for ip in embedded_ipv4(ipaddress.IPv6Address(address))] == inside
