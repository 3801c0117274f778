"""POSTs made as the standard library's HTTP clients make them: the whole body is sent before the
answer is read (`http.client`, `urllib`), unlike curl. `requests` is not among them: urllib3 2
reads an answer already sent when its send breaks, so it reads an early 413 with or without a drain.
Shared by every test package."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

CLIENTS = ("http.client", "urllib")


def post_with(client: str, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """(status, JSON answer) of POST `url` sent by `client`, one of CLIENTS (proxies never used)."""
    if client == "http.client":
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.request("POST", parts.path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()
    if client == "urllib":
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(urllib.request.Request(url, data=body, headers=headers, method="POST"), timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
    raise ValueError(f"unknown client {client!r}: one of {', '.join(CLIENTS)}")
