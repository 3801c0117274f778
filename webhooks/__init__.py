"""Webhooks' library (no Dagster): the receiver (`receiver/`, `commops receiver run`), which writes the
inbox (resources/inbox/, which the sensor reads), signatures and the secrets file, the client
that registers subscriptions with the service (`subscriptions`), and how inbox events become
warehouse rows (`routing`, `refetch`, `reshape`, `settle`, `write`, `organizations`). Their Dagster
assets are in `assets/webhooks/`, the sensor in `pipelines/sensors.py`, the resource in
`resources/webhooks.py`, the commands in `commops_cli/webhooks.py` and `commops_cli/events.py`."""
