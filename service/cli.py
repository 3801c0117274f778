"""`commops service ...`: run and administer the local Commercial Operations Service."""

import click


@click.group()
def service() -> None:
    """Run and administer the local Commercial Operations Service."""
