"""Checks the commands make before any work, and their one-line failures."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import NoReturn

import click

from file_modes.data_dir import ModesError, secure_data_dir
from resources.settings import Settings, SettingsError, load_settings


def fail(command: str, message: str, exit_code: int = 1) -> NoReturn:
    click.echo(f"commops {command} failed: {message}", err=True)
    sys.exit(exit_code)


def check_writable(directory: Path) -> None:
    """Create `directory` if need be and prove a file can be written there (OSError if not)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".write-test-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def prepare_data_dir(settings: Settings) -> None:
    """Create the data directory if need be, give it (and what it holds) its modes, saying so in one line
    on stderr when existing paths changed (file_modes/data_dir.py), and prove it writable. SettingsError
    for an unknown COMMOPS_DATA_GROUP or a mode that cannot be set; OSError when it cannot be written."""
    try:
        notice = secure_data_dir(settings.data_dir, settings.data_group)
    except (ValueError, ModesError) as error:
        raise SettingsError(str(error)) from None
    if notice:
        click.echo(notice, err=True)
    check_writable(settings.data_dir)


def writable_data_dir(command: str, data_dir: str | os.PathLike[str] | None) -> Path:
    """The data directory ($COMMOPS_DATA_DIR or ./data unless given), prepared (`prepare_data_dir`)."""
    try:
        settings = load_settings(data_dir=data_dir)
        prepare_data_dir(settings)
    except SettingsError as error:
        fail(command, str(error))
    except OSError as error:
        fail(command, f"cannot write to the data directory {data_dir or './data'}: {error.strerror or error}")
    return settings.data_dir


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def require_free_port(command: str, port: int, option: str = "--port") -> None:
    if port and not port_free("127.0.0.1", port):
        fail(command, f"port {port} on 127.0.0.1 is in use (choose another with {option})")
