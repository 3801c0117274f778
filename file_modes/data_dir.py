"""The data directory's modes ($COMMOPS_DATA_DIR), and their repair in a directory written earlier with
wider ones (an older version, a loose umask).

Owner-only by default. With COMMOPS_DATA_GROUP, the directory belongs to that group with mode 2750
(setgid: what is created in it inherits the group) and all but the secrets is readable by the group:
the lake, analytics.duckdb, the warehouse, the reconciliation reports. The secrets stay owner-only even
then: the local service's database and demo key, the webhook inbox and secrets file, the organizations
registry, the CRM sandbox (its password and TLS key), the kept contact features (crm-kept: derived for
matching, read by no one), Dagster's home (run logs). Nothing is ever
readable by other users.

Each use checks the directory and its entries below (a dozen stats). When one is wider than it should
be or lacks the group, the entries are walked once and fixed, a chmod (and chown to the group) where
needed: one pass over a large lake, once. Entries the project does not write are left alone (a data
directory set to a home directory by mistake must not have every file in it changed); the directory's
own mode keeps other users away from them.
"""

from __future__ import annotations

import grp
import os
import stat
from fnmatch import fnmatch
from pathlib import Path

from file_modes import DATA_GROUP_ENV, OTHERS

# What the project writes at the top of the data directory (glob patterns), owner-only or shared with the group.
SECRETS = ("service", "inbox", "crm-sandbox", "crm-kept", "dagster_home", "webhook-secrets.json", ".webhook-secrets.json.*.tmp",
           "orgs.json", ".orgs.json.*.tmp")
SHARED = ("lake", "warehouse.*", "analytics.duckdb", ".analytics.duckdb.*.tmp", "reports", "crm", "locks",
          ".orgs.json.lock", "marts.duckdb", ".marts-build.duckdb*", ".marts-source.duckdb*", ".marts-dbt", "marts-docs",
          "marts-dev.duckdb*")
GROUP_WRITE_AND_WORLD = stat.S_IWGRP | stat.S_IRWXO


class ModesError(PermissionError):
    """A path's mode or group cannot be changed; the message is one line naming it and what to do."""


def secure_data_dir(data_dir: Path, group: str | None) -> str | None:
    """Create the data directory if missing and give it and its entries the modes above. Returns the
    line to print when it changed the modes of existing paths, else None. ValueError for an unknown
    group; ModesError where a mode or group cannot be changed; OSError where the directory cannot be
    made. A path that is not a directory is left to the caller's own check."""
    gid = _group_id(group) if group else None
    data_dir = data_dir.resolve()
    if not data_dir.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        _fix(data_dir, False, gid, group)
        return None
    if not data_dir.is_dir():
        return None
    entries = [(path, secret) for path in data_dir.iterdir() if (secret := _is_secret(path.name)) is not None]
    if _as_wanted(data_dir, False, gid) and all(_as_wanted(path, secret, gid) for path, secret in entries):
        return None
    changed = _fix(data_dir, False, gid, group)
    for entry, secret in entries:
        changed += sum(_fix(path, secret, gid, group) for path in _tree(entry))
    if not changed:
        return None
    paths = f"{changed} path{'' if changed == 1 else 's'} under {data_dir}"
    if gid is None:
        return f"commops: tightened permissions on {paths} (other users could read them): owner-only now"
    return f"commops: set permissions on {paths}: readable by the group {group}, secrets owner-only, nothing for other users"


def _group_id(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"{DATA_GROUP_ENV}={name!r} is not a group on this host") from None


def _is_secret(name: str) -> bool | None:
    """True for a secret entry, False for a shared one, None for one the project does not write."""
    if any(fnmatch(name, pattern) for pattern in SECRETS):
        return True
    if any(fnmatch(name, pattern) for pattern in SHARED):
        return False
    return None


def _tree(entry: Path):
    yield entry
    if entry.is_dir() and not entry.is_symlink():
        for folder, folders, files in os.walk(entry):
            for name in (*folders, *files):
                yield Path(folder) / name


def _wanted(info: os.stat_result, secret: bool, gid: int | None) -> tuple[int, int | None]:
    """The mode and group (None: as it is) a path of this stat should have."""
    mode = stat.S_IMODE(info.st_mode)
    if secret or gid is None:
        return mode & ~OTHERS, None
    readable = stat.S_IRGRP | stat.S_IXGRP | stat.S_ISGID if stat.S_ISDIR(info.st_mode) else stat.S_IRGRP
    return mode & ~GROUP_WRITE_AND_WORLD | readable, gid


def _as_wanted(path: Path, secret: bool, gid: int | None) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:  # a temporary file another process renamed meanwhile
        return True
    mode, group = _wanted(info, secret, gid)
    return stat.S_ISLNK(info.st_mode) or (mode == stat.S_IMODE(info.st_mode) and group in (None, info.st_gid))


def _fix(path: Path, secret: bool, gid: int | None, group: str | None) -> bool:
    """Give `path` its mode and group; True when it changed anything. Symbolic links are left alone."""
    try:
        info = path.lstat()
    except FileNotFoundError:  # a temporary file another process removed meanwhile
        return False
    if stat.S_ISLNK(info.st_mode):
        return False
    mode, wanted_gid = _wanted(info, secret, gid)
    changed = False
    if wanted_gid is not None and info.st_gid != wanted_gid:
        try:
            os.chown(path, -1, wanted_gid)
        except OSError as error:
            raise ModesError(f"cannot give {path} to the group {group} ({DATA_GROUP_ENV}): {error.strerror} "
                                  f"(the user running commops must be a member of {group})") from None
        changed = True
    if mode != stat.S_IMODE(path.lstat().st_mode):  # chown may have cleared the setgid bit
        try:
            os.chmod(path, mode)
        except OSError as error:
            raise ModesError(f"cannot change the permissions of {path}: {error.strerror} "
                                  "(is it another user's? its owner can remove other users' access)") from None
        changed = True
    return changed
