"""Which receiver addresses production mode refuses."""

from __future__ import annotations

import pytest

from service.webhooks.safety import is_public


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
    ],
)
def test_non_public_addresses_are_refused(address):
    assert not is_public(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "140.82.112.3", "2001:4860:4860::8888"])
def test_public_addresses_are_allowed(address):
    assert is_public(address)
