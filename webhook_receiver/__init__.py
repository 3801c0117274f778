"""The webhook receiver: verifies the service's signed deliveries and stores them in the inbox.

A program of its own beside `service/`: it shares only `commops_spec` constants with it (and how
both are served, `http_serving`).
Modules: app (ASGI), signatures, envelope, inbox, committer (group commit), delivery_log,
settings, server (uvicorn, through http_serving), subscriptions (the service's webhook API), cli.
"""
