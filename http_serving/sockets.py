"""Listening sockets bound before uvicorn starts: the port is known at once (port 0: a free port
chosen by the OS), and connections made while the app starts wait in the backlog."""

from __future__ import annotations

import errno
import socket

BACKLOG = 2048  # uvicorn's default


class BindError(OSError):
    """The address cannot be listened on; the message is one line naming it and why."""

    def __init__(self, message: str, *, in_use: bool = False) -> None:
        super().__init__(message)
        self.in_use = in_use  # another process listens there: the caller may suggest another port


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (a name, an IPv4 or an IPv6 address), or BindError."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise BindError(f"cannot resolve host {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BindError(f"port {port} on {host} is in use", in_use=True) from None
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, for a server started later by another process (racy by nature:
    prefer port 0 wherever the server is started here)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
