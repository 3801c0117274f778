"""`SilentHost`: a TCP listener on a free loopback port that accepts every connection and never answers,
as a hung service or a black-holing proxy does. Stopped (and its connections closed) by `stop`."""

from __future__ import annotations

import socket
import threading


class SilentHost:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-host", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> SilentHost:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # the listener was closed
                return
            self.connections.append(connection)  # held open, never read, never answered

    def stop(self) -> None:
        self._listener.close()
        self._thread.join(timeout=5)
        for connection in self.connections:
            connection.close()
