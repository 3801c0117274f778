"""File-system helpers shared by the lake, the warehouse, the reports and the CLI: leftovers of dead processes,
durable renames, files replaced whole, locks that name their holder."""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from file_modes import write_private_file


class LockHeld(Exception):
    """The lock is held by another process; `holder` is what that process wrote in it ("pid N")."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextmanager
def holding_lock(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive lock on the file `path`, with "pid N" written in it while this process holds it.

    When another process holds it: without `on_wait`, LockHeld naming that holder at once; with it,
    `on_wait(holder)` is called and the lock is waited for."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if on_wait is None:
                raise LockHeld(holder) from None
            on_wait(holder)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """Whether a process of this pid exists (a leftover naming a live pid may still be in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` so a reader sees the old file or the new one, never half of it; the new
    file is owner-only (the rename keeps the temporary file's mode)."""
    with replacing(path) as temp:
        write_private_file(temp, text.encode())
    fsync_dir(path.parent)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` for the block to write, renamed over `path` when the block ends (removed when
    it raises): a reader of `path`, or one that opened it before, reads the old file or the new one whole."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def remove_abandoned(directory: Path, pattern: str = ".*.tmp") -> None:
    """The temporary files of `replacing` (or named as it names them) in `directory` whose process died."""
    for temp in directory.glob(pattern):
        pid = temp.name.split(".")[-3]
        if pid.isdigit() and not pid_alive(int(pid)):
            temp.unlink(missing_ok=True)


def link_over(source: Path, path: Path) -> None:
    """`path` replaced, in one rename, by the file `source` (a hard link; a copy where the file system has none)."""
    with replacing(path) as temp:
        try:
            os.link(source, temp)
        except OSError:
            shutil.copyfile(source, temp)
