"""Run the service with uvicorn in a background thread (tests, benchmarks, `commops demo`)."""

from __future__ import annotations

import httpx

from http_serving.proxies import proxy_options
from http_serving.server import ThreadedServer
from service.app import create_app
from service.settings import ServiceSettings


class ServiceServer(ThreadedServer):
    """`with ServiceServer(settings) as server: httpx.get(server.base_url + "/kols", ...)`.

    The socket is bound before uvicorn starts (port 0: a free port chosen by the OS), so .port is
    known at once; start() returns once the server answers."""

    name = "service"

    def __init__(self, settings: ServiceSettings, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning"):
        super().__init__(host, port, log_level=log_level, **proxy_options(settings.forwarded_allow_ips))
        self.settings = settings
        self.app = None

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def make_app(self):
        self.app = create_app(self.settings)
        return self.app

    def ready(self) -> bool:
        return httpx.get(f"{self.base_url}/openapi.json", timeout=2).is_success
