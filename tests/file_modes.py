"""Helpers for the tests of who may read what the project writes: a loose umask to start processes with,
the mode of a path, the paths under a folder that a group or other users may reach."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOOSE_UMASK = 0o022  # what most shells start with: files 0644, folders 0755


def loose_umask() -> None:
    """A subprocess's preexec_fn: it starts under LOOSE_UMASK, whatever the test process's is."""
    os.umask(LOOSE_UMASK)


@contextmanager
def umask_of(mask: int) -> Iterator[None]:
    """This process under `mask` for the block (for code that runs in the test process)."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def tree(root: Path) -> Iterator[Path]:
    """`root` and every path under it."""
    yield root
    for folder, folders, files in os.walk(root):
        for name in (*folders, *files):
            yield Path(folder) / name


def reachable_by_others(root: Path, mask: int = stat.S_IRWXG | stat.S_IRWXO) -> list[str]:
    """`root` and the paths under it with any of `mask`'s bits (by default: any group or other-user
    access), as 'mode path' lines."""
    return [f"{mode(path):04o} {path}" for path in tree(root) if mode(path) & mask]
