"""The webhook receiver: verifies the service's signed deliveries and stores them in the inbox.

A program of its own beside `service/`: it shares only `commops_spec` constants with it.
Modules: app (ASGI), signatures, envelope, inbox, committer (group commit), settings,
server (uvicorn), subscriptions (the service's webhook API), cli.
"""
