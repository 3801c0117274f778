"""The `commops sync` terminal display: one progress bar per walk (pages) and for KOL details."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from sync.progress import ProgressReporter


class RichProgress(ProgressReporter):
    def __init__(self, console: Console | None = None):
        self._progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()  # a list read ahead reports from its own thread

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def _task(self, name: str, unit: str) -> TaskID:
        with self._lock:
            if name not in self._tasks:
                self._tasks[name] = self._progress.add_task(name, total=None, unit=unit)
            return self._tasks[name]

    def pages(self, task: str, done: int, total: int | None) -> None:
        self._progress.update(self._task(task, "pages"), completed=done, total=total)

    def items(self, task: str, done: int, total: int | None) -> None:
        self._progress.update(self._task(task, "details"), completed=done, total=total)

    def finished(self, task: str) -> None:
        task_id = self._task(task, "pages")
        done = next(t for t in self._progress.tasks if t.id == task_id).completed or 0
        self._progress.update(task_id, total=done, completed=done)  # a bar with an unknown total ends full
