"""The webhook receiver: verifies the service's signed deliveries and stores them in the inbox.

A program of its own beside `service/`: it shares only `commops_spec` constants with it (and how
both are served, `http_serving`). Modules: app (ASGI), envelope, committer (group commit),
delivery_log, settings, server (uvicorn, through http_serving). Signatures, the secrets file and the
inbox are the webhooks library's (`webhooks/`), shared with the pipeline; `commops receiver run` is
in `commops_cli/receiver.py`.
"""
