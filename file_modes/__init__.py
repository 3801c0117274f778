"""Who may read what this project writes: its owner only (folders 0700, files 0600), whatever umask the
process was started with. With COMMOPS_DATA_GROUP set, the data directory's analyst-facing files are
readable by that group too (folders 0750, files 0640); secrets stay owner-only either way. Shared by the
`commops` command, the code location, the service, the receiver and the Salesforce stand-in;
`data_dir.py` holds the data directory's own rules.

The process umask does most of it (every file a library creates: DuckDB, pyarrow, Dagster's SQLite);
the helpers here give secrets their mode explicitly, since a group umask would let the group read them.
"""

from __future__ import annotations

import os
import stat
from contextlib import suppress
from pathlib import Path

DATA_GROUP_ENV = "COMMOPS_DATA_GROUP"
OWNER_ONLY_UMASK = 0o077  # folders 0700, files 0600
GROUP_READ_UMASK = 0o027  # folders 0750, files 0640: with COMMOPS_DATA_GROUP only
OTHERS = stat.S_IRWXG | stat.S_IRWXO


def restrict_umask() -> None:
    """Set this process's umask (its children inherit it): owner-only, or group-readable when
    COMMOPS_DATA_GROUP names a group. Called once, early, by every entry point that writes files."""
    os.umask(GROUP_READ_UMASK if os.environ.get(DATA_GROUP_ENV) else OWNER_ONLY_UMASK)


def private_dir(path: Path) -> Path:
    """`path` created if missing (0700) and made owner-only if it was wider: what it holds is then
    out of other users' reach, whatever the files' own modes."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _owner_only(path)
    return path


def private_sqlite_file(path: Path) -> Path:
    """An SQLite database file created empty if missing (SQLite takes an empty file for a new database)
    and owner-only. SQLite gives the -wal and -shm files it creates the database file's mode, whatever
    the umask, so this one mode decides all three; existing ones are made owner-only too.

    An existing file is never opened here: closing any descriptor of a database file drops the POSIX
    locks this process's SQLite connections hold on it."""
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if each.exists():
            _owner_only(each)
    return path


def write_private_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` (on disk when this returns), owner-only (0600), also when the file existed
    with a wider mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(fd, 0o600)  # O_CREAT's mode applies to a new file only
        handle.write(data)
        handle.flush()
        os.fsync(fd)


def _owner_only(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & OTHERS:
        os.chmod(path, mode & ~OTHERS)
