"""The `commops` command: `commops service ...` administers the local service,
`commops sync` runs the nightly job in-process (`commops orgs` names the organizations it syncs), `commops status`
shows each organization's state, `commops demo` does both end to end,
`commops receiver run` receives webhooks into the inbox, `commops webhooks ...` manages them,
`commops events apply` applies the inbox's pending events in-process, `commops reconcile` reconciles
the KOLs with the CRM, `commops crm sandbox` serves a local Salesforce stand-in,
`commops review` serves the CRM admins' page,
`commops privacy locate|erase` finds and erases one physician's personal data, `commops marts build` rebuilds
the analysts' marts, `commops docs` writes their documentation site."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
from pathlib import Path

import click

from file_modes import restrict_umask

# Each command's module is imported only when that command runs (click's lazy subcommands): a command that
# needs no Dagster does not pay for importing it, nor the marts' dbt project.
COMMANDS = {
    "service": "service.cli:service",
    "sync": "commops_cli.sync:sync",
    "orgs": "commops_cli.orgs:orgs",
    "status": "commops_cli.status:status",
    "demo": "commops_cli.local:demo",
    "ui": "commops_cli.local:ui",
    "receiver": "commops_cli.receiver:receiver",
    "webhooks": "commops_cli.webhooks:webhooks",
    "events": "commops_cli.events:events",
    "reconcile": "commops_cli.crm:reconcile",
    "crm": "commops_cli.crm:crm",
    "review": "commops_cli.review:review",
    "privacy": "commops_cli.privacy:privacy",
    "marts": "commops_cli.marts:marts",
    "docs": "commops_cli.marts:docs",
}


class OneLineErrors(click.Group):
    """Usage errors as one line naming the command and the option (`commops sync failed: invalid
    value for '--enrich-limit': ...`), not click's usage block; exit code 2 as click's."""

    def main(self, *args, **kwargs):  # type: ignore[override]
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "commops"
            message = error.format_message()
            click.echo(f"{where} failed: {message[:1].lower()}{message[1:]} (see {where} --help)", err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            click.echo(f"commops failed: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("commops: interrupted", err=True)
            sys.exit(130)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and the first lines of their help, as click lists them, read from their modules' source:
        `commops --help` imports none of them (all of them took about 3 s)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, click.Command(name, help=_help_text(name)).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attribute)


def _help_text(name: str) -> str:
    """The docstring of command `name`'s function, from its module's source."""
    module, attribute = COMMANDS[name].split(":")
    function = next(node for node in _parsed(module).body
                    if isinstance(node, ast.FunctionDef) and node.name == attribute)
    return ast.get_docstring(function) or ""


@functools.cache
def _parsed(module: str) -> ast.Module:
    """A module's source, parsed once (several commands share a module)."""
    return ast.parse(Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8"))


@click.group(cls=OneLineErrors)
@click.version_option(package_name="commops-sync", prog_name="commops")
def main() -> None:
    """commops-sync: the Commercial Operations Service sync."""
    restrict_umask()  # before any command writes: what it creates is owner-only (file_modes)


if __name__ == "__main__":
    sys.exit(main(prog_name="commops"))
