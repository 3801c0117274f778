"""The nightly sync's library (no Dagster): the one declarative catalog of the four API resources
(`catalog`), their explicit Arrow schemas (`schemas`), API records turned into Arrow batches
(`records`) and the progress reporter the assets call (`progress`). The sync's Dagster assets are in
`assets/` (lake, warehouse, kol_details), its resources in `resources/`, its command in
`commops_cli/sync.py`."""
