"""Stopping the long-running commands and their children, whatever stops them.

SIGTERM (what systemd, `docker stop` and `kill` send) is raised in the main thread as Ctrl-C is
(`Terminated`, a KeyboardInterrupt), so a command's clean-up runs either way. A child that starts
processes of its own (`dg dev`: webserver, daemon, code server, a process per run) runs in a
process group of its own: the signal that stops the command goes to that whole group, and whatever
of it is still alive GRACE_SECONDS later is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GRACE_SECONDS = 20.0


def peak_rss_mb() -> float:
    """This process's peak resident set since exec (VmHWM), in MB; ru_maxrss where /proc is missing.
    (ru_maxrss of a child started with vfork counts its parent's memory before exec: benchmarks/memory.py)"""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Terminated(KeyboardInterrupt):
    """SIGTERM was received."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated in the main thread and SIGINT KeyboardInterrupt, also
    when this process was started with SIGINT ignored (`commops ui &` in a script): children started
    within then get SIGINT's default too, which `dg dev` also takes SIGTERM to mean."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def start_group(command: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Start `command` as the leader of a new process group (its children join that group)."""
    return subprocess.Popen(command, process_group=0, **popen)


def run_group(command: Sequence[str], **popen: Any) -> int | None:
    """Run `command` in a process group of its own until it exits, or until Ctrl-C or SIGTERM here:
    the same signal then goes to its whole group (stop_group). Returns its exit code (None when stopped)."""
    with signals_as_interrupts():
        process = start_group(command, **popen)
        signum = signal.SIGTERM
        try:
            return process.wait()
        except KeyboardInterrupt as stop:
            signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
            return None
        finally:
            stop_group(process, signum)


def stop_group(process: subprocess.Popen, signum: int = signal.SIGTERM, grace: float = GRACE_SECONDS) -> None:
    """Send `signum` to the group `process` leads, wait up to `grace` s for every member to end,
    then kill what is left (at once on a second Ctrl-C or SIGTERM). Returns once the group is gone."""
    group = process.pid
    if group_members(group):
        _signal(group, signum)
        deadline = time.monotonic() + grace
        try:
            while time.monotonic() < deadline:
                process.poll()  # reaps the leader, whose zombie would count as a member
                if not group_members(group):
                    break
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        if group_members(group):
            _signal(group, signal.SIGKILL)
    process.wait()


def group_members(group: int) -> list[int]:
    """Live processes (zombies excluded) of process group `group`: read from /proc on Linux."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [group]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after its last ")".
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == group and state != "Z":
            members.append(int(entry.name))
    return members


def _signal(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass
