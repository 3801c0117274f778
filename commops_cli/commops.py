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

import sys

import click

from file_modes import restrict_umask
from commops_cli.crm import crm, reconcile
from commops_cli.events import events
from commops_cli.local import demo, ui
from commops_cli.marts import docs, marts
from commops_cli.orgs import orgs
from commops_cli.status import status
from commops_cli.privacy import privacy
from commops_cli.sync import sync
from commops_cli.webhooks import webhooks
from service.cli import service
from commops_cli.receiver import receiver
from commops_cli.review import review


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


@click.group(cls=OneLineErrors)
@click.version_option(package_name="commops-sync", prog_name="commops")
def main() -> None:
    """commops-sync: the Commercial Operations Service sync."""
    restrict_umask()  # before any command writes: what it creates is owner-only (file_modes)


main.add_command(service)
main.add_command(sync)
main.add_command(orgs)
main.add_command(status)
main.add_command(demo)
main.add_command(ui)
main.add_command(receiver)
main.add_command(webhooks)
main.add_command(events)
main.add_command(reconcile)
main.add_command(crm)
main.add_command(review)
main.add_command(privacy)
main.add_command(marts)
main.add_command(docs)


if __name__ == "__main__":
    sys.exit(main(prog_name="commops"))
