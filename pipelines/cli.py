"""The `commops` command: `commops service ...` administers the local service,
`commops sync` runs the nightly job in-process, `commops demo` does both end to end,
`commops receiver run` receives webhooks into the inbox, `commops webhooks ...` manages them."""

from __future__ import annotations

import click

from pipelines.local_commands import demo, ui
from pipelines.sync_command import sync
from service.cli import service
from webhook_receiver.cli import receiver, webhooks


@click.group()
def main() -> None:
    """commops-sync: the Commercial Operations Service sync."""


main.add_command(service)
main.add_command(sync)
main.add_command(demo)
main.add_command(ui)
main.add_command(receiver)
main.add_command(webhooks)


if __name__ == "__main__":
    main()
