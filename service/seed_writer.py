"""Where the seed's rows go: the service database, one chunk at a time, beside their generation.

    with open_writer(db_path, large=True) as writer:
        writer.write({"kols": [...], "interactions": [...]})  # a chunk: committed together
        writer.refresh(kol_ids)                                 # derived KOL fields (metrics.refresh_kol_metrics)
    # leaving the block commits, and raises SeedWriterError if the writer failed

A large seed is written by a child process (`python -m service.seed_writer DB`, messages pickled
over its stdin) with a connection of its own: SQLite's work (inserts, index upkeep, commits, the
refresh) runs on a second core while this process generates the next chunk. The pipe holds
about one chunk, so memory stays flat. Into empty tables a large seed also drops the non-unique
indexes for the load and builds them once before the refresh: CREATE INDEX sorts, where keeping
them up to date row by row, at random ids, is most of a large seed's time. db.init_db creates
a missing index again on every start, so an interrupted seed leaves none missing for good.

Chunks are committed in groups of about ROWS_PER_COMMIT rows: a commit writes every page its
chunks touched, and with random ids that is most pages of the indexes, however few the rows.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.store import db, metrics, seeding

ROWS_PER_COMMIT = 1_000_000


class SeedWriterError(RuntimeError):
    """The writer process failed; the message is its error."""


class _Writer:
    """Writes chunks on one connection, in transactions of about ROWS_PER_COMMIT rows."""

    def __init__(self, db_path: str | Path, *, defer_indexes: bool):
        self.db_path = db_path
        self.conn = db.connect(db_path)
        seeding.tune_for_bulk_load(self.conn)
        self.uncommitted = 0
        self.indexes_dropped = defer_indexes and seeding.drop_indexes_of_empty_tables(self.conn)
        self.indexes_checked = not defer_indexes

    def write(self, batch: dict[str, list[tuple]]) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
        for table, rows in batch.items():
            seeding.insert_rows(self.conn, table, rows)
            self.uncommitted += len(rows)
        if self.uncommitted >= ROWS_PER_COMMIT:
            self.commit()

    def refresh(self, kol_ids: list[str]) -> None:
        self.restore_indexes()
        with db.transaction(self.conn):
            metrics.refresh_kol_metrics(self.conn, kol_ids, touch=False)

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.uncommitted = 0

    def restore_indexes(self) -> None:
        """Build the dropped indexes; before a refresh also those another large seed may have dropped."""
        self.commit()
        if self.indexes_dropped or not self.indexes_checked:
            db.init_db(self.db_path)  # the schema again: CREATE INDEX IF NOT EXISTS
            self.indexes_dropped, self.indexes_checked = False, True

    def close(self, failed: bool) -> None:
        try:
            if failed and self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.restore_indexes()
        finally:
            self.conn.close()


class _ProcessWriter:
    """A _Writer in a child process: write and refresh send their work down its stdin."""

    def __init__(self, db_path: str | Path):
        package_root = str(Path(__file__).resolve().parents[1])  # the child imports service/ from here too
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
        self.process = subprocess.Popen([sys.executable, "-m", "service.seed_writer", str(db_path)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def write(self, batch: dict[str, list[tuple]]) -> None:
        self._send(("write", batch))

    def refresh(self, kol_ids: list[str]) -> None:
        self._send(("refresh", kol_ids))

    def close(self, failed: bool) -> None:
        try:
            try:
                self._send(("close", failed))
                reply = self._reply()
            except SeedWriterError as exc:
                reply = str(exc)
            if reply is not None and not failed:  # after a failure here, that failure is the one to report
                raise SeedWriterError(reply)
        finally:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _send(self, message: tuple) -> None:
        try:
            pickle.dump(message, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):  # the writer stopped: it says why
            raise SeedWriterError(self._reply() or "the seed writer process stopped") from None

    def _reply(self) -> str | None:
        try:
            return pickle.load(self.process.stdout)
        except (EOFError, pickle.UnpicklingError):
            return f"the seed writer process ended unexpectedly (exit code {self.process.wait()})"


Writer = _Writer | _ProcessWriter  # the same methods: write(batch), refresh(kol_ids), close(failed)


@contextmanager
def open_writer(db_path: str | Path, *, large: bool) -> Iterator[Writer]:
    writer = _ProcessWriter(db_path) if large else _Writer(db_path, defer_indexes=False)
    try:
        yield writer
    except BaseException:
        writer.close(failed=True)
        raise
    writer.close(failed=False)


def _serve(db_path: str) -> None:
    """The writer process: apply the messages on stdin until close; reply None, or the error."""
    messages, replies = sys.stdin.buffer, sys.stdout.buffer
    writer = None
    try:
        writer = _Writer(db_path, defer_indexes=True)
        while True:
            kind, payload = pickle.load(messages)
            if kind == "close":
                writer.close(failed=payload)
                reply = None
                break
            getattr(writer, kind)(payload)
    except (EOFError, KeyboardInterrupt):  # the generator went away: keep what was committed
        reply = "the seed was interrupted"
        if writer is not None:
            writer.close(failed=True)
    except Exception as exc:  # noqa: BLE001 (reported to the generator, which raises it)
        reply = f"the seed writer failed: {type(exc).__name__}: {exc}"
        if writer is not None:
            try:
                writer.close(failed=True)
            except sqlite3.Error:
                pass
    try:
        pickle.dump(reply, replies)
        replies.flush()
    except BrokenPipeError:  # the generator is gone already
        pass


if __name__ == "__main__":
    _serve(sys.argv[1])
