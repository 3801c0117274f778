"""`commops privacy locate|erase`: where one physician's personal data is, and erasing it everywhere
(privacy/: the stores, the suppression list, the erasure log)."""

from __future__ import annotations

import click

from commops_cli.command_checks import fail, writable_data_dir
from privacy import erase as erasure
from privacy.subject import Subject
from privacy.suppression import PrivacyKeyMissing, PrivacyStore, privacy_key
from resources.inbox import InboxUnreachable
from resources.settings import SettingsError

DATA_DIR_HELP = "Data directory (default: $COMMOPS_DATA_DIR or ./data)."
OWNERS_NOTE = ("The source system (the Commercial Operations Service) and the CRM keep their own copies: "
               "ask their owners to erase the person there too.")


@click.group("privacy")
def privacy() -> None:
    """Personal data of the KOLs: locate one person, erase them everywhere, keep them out."""


def _subject(command: str, data_dir, kol: str | None, email: str | None, org: str | None) -> Subject:
    if bool(kol) == bool(email):
        fail(command, "give exactly one of --kol ID or --email ADDRESS", 2)
    return erasure.resolve(data_dir, kol_id=kol, email=email, org=org)


class _Waits:
    """Where an erasure says it waits for a sync writing the warehouse, or for a marts build: stderr."""

    @staticmethod
    def info(message: str) -> None:
        click.echo(message, err=True)


def _print_findings(outcome: erasure.Outcome, verb: str) -> None:
    click.echo(f"KOL(s): {', '.join(outcome.subject.kol_ids) or 'none found by id'}; "
               f"email(s): {len(outcome.subject.emails)}")
    for finding in outcome.findings:
        click.echo(f"  {finding.store:9} {finding.rows:6} row(s) {verb}  {finding.location}")


@privacy.command("locate")
@click.option("--kol", metavar="ID", help="The KOL's id (kol_...).")
@click.option("--email", metavar="ADDRESS", help="An email address: every KOL holding it.")
@click.option("--org", help="Only this organization's lake folders and warehouse rows (default: every organization).")
@click.option("--data-dir", help=DATA_DIR_HELP)
def locate(kol, email, org, data_dir) -> None:
    """Every store and how many rows hold the person (for an access request, or to check an erasure)."""
    data = writable_data_dir("privacy locate", data_dir)
    subject = _subject("privacy locate", data, kol, email, org)
    try:
        outcome = erasure.locate(data, subject)
    except (InboxUnreachable, SettingsError) as error:  # the inbox's Postgres, the lake on S3, the Iceberg catalog:
        fail("privacy locate", str(error))  # one line naming the setting, never a password
    if not outcome.findings:
        click.echo("Nothing found: no store of this data directory holds the person.")
        return
    _print_findings(outcome, "hold the person")
    click.echo(f"{outcome.rows} row(s) in {len(outcome.findings)} place(s).")


@privacy.command("erase")
@click.option("--kol", metavar="ID", help="The KOL's id (kol_...).")
@click.option("--email", metavar="ADDRESS", help="An email address: every KOL holding it is erased.")
@click.option("--org", help="Only this organization's lake folders and warehouse rows (default: every organization).")
@click.option("--dry-run", is_flag=True, help="List every store and the rows it would touch; change nothing.")
@click.option("--lift", is_flag=True, help="Undo a suppression (the person may be synced again); logged.")
@click.option("--data-dir", help=DATA_DIR_HELP)
def erase(kol, email, org, dry_run, lift, data_dir) -> None:
    """Erase the person from every store, suppress them from later syncs and events, log it (no personal data)."""
    data = writable_data_dir("privacy erase", data_dir)
    subject = _subject("privacy erase", data, kol, email, org)
    try:
        key = privacy_key()
        if lift:
            removed = PrivacyStore(data).lift(key, subject)
            click.echo(f"Suppression lifted: {removed} entr{'y' if removed == 1 else 'ies'} removed (logged); "
                       "later syncs and events bring the person back.")
            return
        if dry_run:
            outcome = erasure.locate(data, subject)
            if not outcome.findings:
                click.echo("Dry run: nothing to erase, no store holds the person.")
            else:
                _print_findings(outcome, "would be erased")
                click.echo(f"Dry run: {outcome.rows} row(s) in {len(outcome.findings)} place(s) would be erased.")
            return
        outcome = erasure.erase(data, subject, log=_Waits)
    except (PrivacyKeyMissing, InboxUnreachable, SettingsError) as error:
        fail("privacy erase", str(error))
    if outcome.findings:
        _print_findings(outcome, "erased")
        click.echo(f"Erased {outcome.rows} row(s) in {len(outcome.findings)} place(s); the person is suppressed "
                   "from later syncs and webhook events (logged).")
    else:
        click.echo("Nothing left to erase: no store holds the person (suppression in place, logged).")
    click.echo(OWNERS_NOTE)


@privacy.command("log")
@click.option("--data-dir", help=DATA_DIR_HELP)
def log(data_dir) -> None:
    """The erasures and lifts done in this data directory (no personal data: a keyed hash names each request)."""
    data = writable_data_dir("privacy log", data_dir)
    try:
        entries = PrivacyStore(data).entries()
    except InboxUnreachable as error:
        fail("privacy log", str(error))
    if not entries:
        click.echo("No erasure or lift recorded.")
        return
    for at, user, action, subject, stores, rows in entries:
        click.echo(f"{at}  {user:12} {action:17} request {subject[:16]}  {rows} row(s)  {stores}")
