"""A command's processes, read from /proc, and the check every long-running command must pass:
after SIGTERM it exits, every process it started is gone and its ports are free, within 30 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from tests.waiting import wait_until

STOP_SECONDS = 30.0


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = text[text.rindex(")") + 2:].split()[:2]  # comm may hold spaces and parentheses
    return state, int(ppid)


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (children, their children, ...)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def living(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie has ended)."""
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] != "Z"}


def answers(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def wait_for_url(process: subprocess.Popen, url: str, timeout: float, log: Path, interval: float = 0.2) -> None:
    """Wait until `url` answers 200, failing with the end of `log` as soon as `process` has died."""
    import httpx

    def up() -> bool:
        assert process.poll() is None, log.read_text()[-2000:]
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout, interval, what=f"{url} to answer")


def terminate(process: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM `process` (if still running) and wait for it; SIGKILL when it outlives `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def assert_stops_on_sigterm(process: subprocess.Popen, ports: list[int]) -> None:
    """SIGTERM `process`; within STOP_SECONDS it has exited, every process it had started is gone
    and nothing answers on `ports` any more."""
    started = descendants(process.pid)
    process.send_signal(signal.SIGTERM)

    def stopped() -> bool:
        return process.poll() is not None and not living(started) and not any(answers(port) for port in ports)

    try:
        wait_until(stopped, STOP_SECONDS, 0.1, what="the command, its processes and its ports to stop")
    except AssertionError:
        left = living(started)
        for pid in left | living({process.pid}):  # leave nothing behind for the next tests
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"{STOP_SECONDS:.0f} s after SIGTERM: exit code {process.poll()}, still running "
                             f"{sorted(left)}, ports answering {[p for p in ports if answers(p)]}") from None
