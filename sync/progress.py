"""Progress of a run's paging, reported to whoever watches (the `commops sync` display).

Assets receive a `ProgressReporter` as the "progress" resource; Dagster runs get the silent
default, `commops sync` passes its rich display.
"""

from __future__ import annotations


class ProgressReporter:
    """Silent by default; subclasses draw something."""

    def pages(self, task: str, done: int, total: int | None) -> None:
        """`done` of `total` pages of `task` (e.g. "kols", "kols archived") fetched."""

    def items(self, task: str, done: int, total: int | None) -> None:
        """`done` of `total` items of `task` (e.g. KOL details) fetched."""

    def finished(self, task: str) -> None:
        """`task` is complete."""
