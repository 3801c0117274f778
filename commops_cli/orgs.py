"""`commops orgs add|list|remove`: the organizations this deployment syncs.

Each organization is a partition (`orgs`) of the same assets, with its own service address and the
name of the environment variable holding its API key (the registry never holds a key). The commands
change the registry (resources/orgs.py) and the Dagster instance's partitions together; under a
deployed daemon, `orgs_sensor` keeps the partitions equal to the registry as well.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from commops_cli.command_checks import fail, writable_data_dir
from resources.orgs import DEFAULT_ORG, OrgRegistry, check_org
from resources.settings import SettingsError, load_settings

DATA_DIR_HELP = "Data directory holding the registry (default: $COMMOPS_DATA_DIR or ./data; COMMOPS_ORGS_URL: Postgres)."


@contextmanager
def _partitions(data: Path) -> Iterator[tuple]:
    """The Dagster instance of the data directory and the name of its organizations' partitions. Dagster is imported
    here, once the registry has changed: `list`, and the commands refused on their input, answer without it."""
    from assets.partitions import ORGS
    from commops_cli.dagster_home import dagster_instance

    with dagster_instance(load_settings(data_dir=data)) as instance:
        yield instance, ORGS.name


@click.group("orgs")
def orgs() -> None:
    """Organizations this deployment syncs, one partition each (the default one: COMMOPS_BASE_URL)."""


@orgs.command("add")
@click.argument("name")
@click.option("--base-url", required=True, help="The organization's service address, including /v1.")
@click.option("--api-key-env", required=True, metavar="VAR",
              help="Environment variable holding its API key where syncs run (only the name is stored).")
@click.option("--organization-id", metavar="org_...", help="Its organization id in the service: routes its webhook events.")
@click.option("--allow-unset-key", is_flag=True,
              help="Register even though VAR is not set here (the key lives only where runs execute).")
@click.option("--allow-insecure-http", is_flag=True,
              help="Accept a plain http:// address on a host other than loopback (the API key then travels unencrypted).")
@click.option("--data-dir", help=DATA_DIR_HELP)
def add(name, base_url, api_key_env, organization_id, allow_unset_key, allow_insecure_http, data_dir) -> None:
    """Register organization NAME: nightly syncs include it from now on."""
    data = writable_data_dir("orgs add", data_dir)
    try:
        org = check_org(name, base_url, api_key_env, organization_id, allow_insecure_http)
        if not os.environ.get(api_key_env) and not allow_unset_key:
            raise SettingsError(f"{api_key_env} is not set: export {api_key_env}=<the API key of {name}> first "
                                "(the registry stores only the variable's name; --allow-unset-key if it is set "
                                "only where runs execute)")
        OrgRegistry(data).add(org)
        with _partitions(data) as (instance, partitions):
            if not instance.has_dynamic_partition(partitions, name):
                instance.add_dynamic_partitions(partitions, [name])
    except SettingsError as error:
        fail("orgs add", str(error))
    routed = f", events of {organization_id}" if organization_id else ""
    click.echo(f"organization {name} added: {org.base_url}, key from {api_key_env}{routed}; "
               f"sync it with: commops sync --org {name}")


@orgs.command("list")
@click.option("--data-dir", help=DATA_DIR_HELP)
def list_(data_dir) -> None:
    """Every organization a nightly run syncs, with where its key is read from."""
    data = writable_data_dir("orgs list", data_dir)
    try:
        registry = OrgRegistry(data)
        registered = {org.name for org in registry.registered()}
        everyone = registry.all()
    except SettingsError as error:
        fail("orgs list", str(error))
    if not everyone:
        click.echo("no organization: set COMMOPS_BASE_URL (the default one) or commops orgs add NAME ...")
        return
    table = Table(title=f"organizations ({registry.location})")
    for column in ("name", "base url", "API key from", "organization id", "defined by"):
        table.add_column(column, no_wrap=column in ("name", "API key from"))
    for org in everyone:
        key = f"{org.api_key_env} ({'set' if os.environ.get(org.api_key_env) else 'NOT SET here'})"
        source = "registry" if org.name in registered else "environment (COMMOPS_BASE_URL)"
        table.add_row(org.name, org.base_url, key, org.organization_id or "-", source)
    Console(width=None if os.isatty(1) else 200).print(table)


@orgs.command("remove")
@click.argument("name")
@click.option("--data-dir", help=DATA_DIR_HELP)
def remove(name, data_dir) -> None:
    """Stop syncing organization NAME (its rows stay in the warehouse and the lake)."""
    data = writable_data_dir("orgs remove", data_dir)
    try:
        OrgRegistry(data).remove(name)
        with _partitions(data) as (instance, partitions):
            default_from_env = name == DEFAULT_ORG and any(o.name == DEFAULT_ORG for o in OrgRegistry(data).all())
            if instance.has_dynamic_partition(partitions, name) and not default_from_env:
                instance.delete_dynamic_partition(partitions, name)
    except SettingsError as error:
        fail("orgs remove", str(error))
    click.echo(f"organization {name} removed: nightly runs no longer sync it; its rows stay in the warehouse "
               f"(WHERE org = '{name}') and under lake/org={name}/")
