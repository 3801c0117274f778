"""Serving an ASGI app with uvicorn on a socket bound beforehand, in the foreground or in a thread.

The service, the receiver, the Salesforce stand-in and the tests' spec server share nothing else:
this package knows no app of theirs, only how each of them is served.

- `sockets`: `bind(host, port)`, a listening socket or a one-line `BindError`; `free_port()`.
- `server`: `serve(app, sock)` in the foreground until SIGINT/SIGTERM; `ThreadedServer`, uvicorn in
  a daemon thread (start() returns once it answers, stop() joins it).
- `lingering`: `LingeringClose`, so a 413 sent before the body was read is read by every client.
"""
