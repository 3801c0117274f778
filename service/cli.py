"""`commops service ...`: run and administer the local Commercial Operations Service.

Every command takes --db PATH (default: $COMMOPS_SERVICE_DB, else
$COMMOPS_DATA_DIR/service/service.db, the database `commops demo` seeds; COMMOPS_DATA_DIR
defaults to ./data; an empty variable counts as unset). Only create-org and run create a missing
database, and only in a directory that exists (or the data directory's service/ folder); the
other commands refuse it. Commands that create something print its id or key alone on the last
line, so scripts can take `| tail -n 1`. Failures print one line, `commops service CMD failed:
...`, and exit 1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import NoReturn

import click

from commops_spec.constants import PLANS

DEFAULT_DB = "$COMMOPS_DATA_DIR/service/service.db"


def _default_db() -> Path:
    from service.settings import default_db_path

    return Path(os.environ.get("COMMOPS_SERVICE_DB") or default_db_path())


def db_option(func):
    return click.option(
        "--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=_default_db,
        show_default="$COMMOPS_SERVICE_DB or " + DEFAULT_DB, help="SQLite database of the service.",
    )(func)


def _fail(message: str) -> NoReturn:
    """One line on stderr and exit 1: `commops service CMD failed: message`."""
    command = click.get_current_context().info_name
    click.echo(f"commops service {command} failed: {message}", err=True)
    sys.exit(1)


def _existing_db(db: Path) -> Path:
    """Refuse a database that does not exist instead of creating an empty one."""
    if not db.is_file():
        _fail(f"no service database at {db}: run `commops demo`, or `commops service create-org --db {db}`")
    return db


def _open_db(db: Path) -> None:
    """Create the schema if needed and check that the file is an SQLite database we can write. A
    missing database is created only in a directory that exists (or in the data directory's
    service/ folder, which is ours to make): a mistyped --db is refused, not served empty."""
    from service.settings import default_db_path
    from service.store.db import init_db

    if not db.exists() and not db.parent.is_dir() and db.resolve() != default_db_path().resolve():
        _fail(f"no directory {db.parent} for the database {db}: create it first, or fix --db")
    try:
        init_db(db)
    except (sqlite3.Error, OSError) as exc:
        _fail(f"cannot open database {db}: {exc}")


@click.group()
def service() -> None:
    """Run and administer the local Commercial Operations Service."""


@service.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--no-rate-limits", is_flag=True, help="Never answer 429 for request rates (headers still sent).")
@click.option("--extra-fields", is_flag=True, help="Schema drift: add unknown fields to every item.")
@click.option("--simulate", "--simulate-per-second", "simulate_per_second", type=float, default=None,
              help="Activity simulator rate (changes per second); 0 = off.")
@click.option("--fault-seed", type=int, default=None, help="Seed of the fault sequence.")
@click.option("--fault", "faults", multiple=True, metavar="KIND=RATE",
              help="Fault rate, repeatable: 500, 503, 429, slow, drop, truncate (e.g. --fault 500=0.05).")
@click.option("--fault-slow-seconds", type=float, default=None)
def run(db: Path, host: str, port: int, no_rate_limits: bool, extra_fields: bool, simulate_per_second: float | None,
        fault_seed: int | None, faults: tuple[str, ...], fault_slow_seconds: float | None) -> None:
    """Serve the API until interrupted: Ctrl-C or SIGTERM (settings also from COMMOPS_SERVICE_* variables)."""
    from pydantic import ValidationError

    from http_serving.proxies import proxy_options
    from http_serving.server import serve
    from http_serving.sockets import BindError, bind
    from service.app import create_app
    from service.settings import ServiceSettings

    overrides: dict = {"db": db}
    if no_rate_limits:
        overrides["rate_limits_enabled"] = False
    if extra_fields:
        overrides["extra_fields"] = True
    if simulate_per_second is not None:
        overrides["simulate_per_second"] = simulate_per_second
    if fault_seed is not None:
        overrides["fault_seed"] = fault_seed
    if fault_slow_seconds is not None:
        overrides["fault_slow_seconds"] = fault_slow_seconds
    for spec in faults:
        kind, _, rate = spec.partition("=")
        if kind not in ("500", "503", "429", "slow", "drop", "truncate"):
            raise click.BadParameter(f"unknown fault kind {kind!r} in {spec!r}", param_hint="--fault")
        try:
            overrides[f"fault_{kind}_rate"] = float(rate)
        except ValueError:
            raise click.BadParameter(f"rate of {spec!r} must be a number", param_hint="--fault") from None
    try:
        settings = ServiceSettings(**overrides)
    except ValidationError as exc:
        problem = exc.errors()[0]
        _fail(f"COMMOPS_SERVICE_{str(problem['loc'][0]).upper()}: {problem['msg'].removeprefix('Value error, ')}")
    created = not db.exists()
    _open_db(db)
    try:
        sock = bind(host, port)
    except BindError as exc:
        _fail(str(exc))
    if created:
        click.echo(f"Created an empty database at {db}: every key gets 401 until `commops service create-org` "
                   "and `create-key` add one (or `commops demo` seeds the default database)", err=True)
    click.echo(f"Serving http://{host}:{sock.getsockname()[1]}/v1 from {db}", err=True)
    serve(create_app(settings), sock, log_level="info", **proxy_options(settings.forwarded_allow_ips))


@service.command("create-org")
@db_option
@click.argument("name")
@click.option("--plan", type=click.Choice(list(PLANS)), required=True)
@click.option("--owner-email", default=None, help="Receives webhook failure notifications.")
def create_org(db: Path, name: str, plan: str, owner_email: str | None) -> None:
    """Create an organization; prints its id on the last line."""
    from service import admin

    _open_db(db)
    org_id = admin.create_org(db, name, plan, owner_email)
    click.echo(f"Created organization {name!r} on plan {plan}", err=True)
    click.echo(org_id)


@service.command("create-key")
@db_option
@click.option("--org", "org_id", required=True, help="Organization id (org_...).")
@click.option("--scopes", required=True, help="Comma-separated scopes, or 'all'.")
def create_key(db: Path, org_id: str, scopes: str) -> None:
    """Create an API key; prints the key (shown this once) on the last line."""
    from service import admin
    from service.store.orgs import UnknownOrganization

    wanted: list[str] | str = "all" if scopes.strip() == "all" else [s.strip() for s in scopes.split(",") if s.strip()]
    _existing_db(db)
    try:
        key = admin.create_key(db, org_id, wanted)
    except (ValueError, UnknownOrganization) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("Created API key; store it now, it is not shown again:", err=True)
    click.echo(key)


@service.command("list-keys")
@db_option
def list_keys(db: Path) -> None:
    """List API keys (ids and prefixes, never the keys)."""
    from service import admin

    for key in admin.list_keys(_existing_db(db)):
        state = f"revoked {key['revoked_at']}" if key["revoked_at"] else "active"
        click.echo(f"{key['id']}\t{key['key_prefix']}...\t{key['org_id']}\t{key['plan']}\t"
                   f"{','.join(key['scopes'])}\t{state}")


@service.command("revoke-key")
@db_option
@click.argument("key_id")
def revoke_key(db: Path, key_id: str) -> None:
    """Revoke an API key by id (or unambiguous prefix)."""
    from service import admin

    _existing_db(db)
    try:
        revoked = admin.revoke_key(db, key_id)
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(revoked)


# `seed` (service/seed.py's helper) is added below as @service.command() def seed(...).


@service.command("seed")
@db_option
@click.option("--org", "org_id", required=True, help="Organization id (org_...) that receives the data.")
@click.option("--kols", default=200, show_default=True, type=click.IntRange(min=0))
@click.option("--campaigns", default=30, show_default=True, type=click.IntRange(min=0))
@click.option("--products", default=25, show_default=True, type=click.IntRange(min=0))
@click.option("--signals", default=150, show_default=True, type=click.IntRange(min=0))
@click.option("--events", default=40, show_default=True, type=click.IntRange(min=0))
@click.option("--random-seed", default=0, show_default=True, type=int,
              help="Same seed, same organization, same starting data and same reference end: same rows.")
@click.option("--reference-end", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="Dates fall in the two years before this day (UTC); default: today.")
def seed(db: Path, org_id: str, kols: int, campaigns: int, products: int, signals: int, events: int,
         random_seed: int, reference_end) -> None:
    """Add deterministic, realistic synthetic data to an organization; prints rows written per table.

    The defaults give a small dataset in which every enum value and list filter has matches.
    A bulk load: no webhook events are emitted and the plan's KOL limit does not apply."""
    import time

    from service.seed import seed as run_seed
    from service.seed_writer import SeedWriterError

    _existing_db(db)
    started = time.perf_counter()
    try:
        counts = run_seed(db, org_id, kols=kols, campaigns=campaigns, products=products, signals=signals,
                          events=events, random_seed=random_seed, reference_end=reference_end,
                          progress=lambda stage, done, total: click.echo(f"  {stage}: {done}/{total}", err=True))
    except (ValueError, SeedWriterError) as exc:
        raise click.ClickException(str(exc)) from None
    for table, count in counts.items():
        click.echo(f"{table}\t{count}")
    click.echo(f"Seeded {org_id} in {time.perf_counter() - started:.1f} s", err=True)


@service.command("demo-key")
def demo_key() -> None:
    """Print the API key of `commops demo`'s organization ($COMMOPS_DATA_DIR/service/demo-credentials.json)."""
    path = Path(os.environ.get("COMMOPS_DATA_DIR") or "./data") / "service" / "demo-credentials.json"
    try:
        key = json.loads(path.read_text())["api_key"]
    except FileNotFoundError:
        _fail(f"no demo credentials at {path}: run `commops demo` first")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _fail(f"cannot read demo credentials at {path}: {exc!r}: run `commops demo` again")
    click.echo(key)


# `deliver` (the webhook delivery worker on its own) lives with the webhooks: service/webhooks/cli.py.
from service.webhooks.cli import deliver  # noqa: E402

service.add_command(deliver)
