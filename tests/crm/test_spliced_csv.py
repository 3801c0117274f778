"""A night's reconciliation CSV copies the lines of the rows that did not change from the night before's file,
and is byte for byte the CSV written whole; a previous file that is not as written, or an index from other code,
is never spliced from."""

from __future__ import annotations

import errno
import os

import duckdb
import pytest

from crm import kept_features, report, spliced_csv
from crm.reconcile import reconcile
from tests.crm.test_kept_features import change_a_night, warehouse

ORG = "default"


def night(conn: duckdb.DuckDBPyConnection, data_dir, run_id: str, name: str) -> spliced_csv.Written:
    """A reconciliation with kept features, and its CSV written as the job writes it (the index in the kept file)."""
    with kept_features.attached(conn, data_dir, ORG) as kept:
        reconcile(conn, "kols", "contacts", run_id=run_id, kept=kept)
        return spliced_csv.write(conn, report.csv_rows(ORG), data_dir / name, kept)


def whole(conn: duckdb.DuckDBPyConnection, path) -> bytes:
    """The CSV of the result as it stands, every line made."""
    report.write_csv(conn, path, ORG)
    return path.read_bytes()


@pytest.fixture
def first_night(tmp_path):
    conn = warehouse(tmp_path / "w.duckdb")
    written = night(conn, tmp_path, "night-1", "night-1.csv")
    assert written.copied == 0 and written.rows > 2000
    assert (tmp_path / "night-1.csv").read_bytes() == whole(conn, tmp_path / "whole-1.csv")
    return conn, tmp_path


def test_a_night_copies_the_unchanged_lines_and_writes_the_file_a_whole_write_gives(first_night):
    conn, tmp_path = first_night
    change_a_night(conn)  # retitled, renamed, re-emailed, deleted and new contacts, an archived KOL
    written = night(conn, tmp_path, "night-2", "night-2.csv")
    spliced = (tmp_path / "night-2.csv").read_bytes()
    assert spliced == whole(conn, tmp_path / "whole-2.csv")
    changed = written.rows - written.copied
    assert written.copied > written.rows * 0.8 and changed > 50, written
    # a third night from the spliced file: its index is right too
    conn.execute("UPDATE contacts SET department = 'Cardiology' WHERE hash(crm_id) % 20 = 7")
    written = night(conn, tmp_path, "night-3", "night-3.csv")
    assert 0 < written.copied < written.rows
    assert (tmp_path / "night-3.csv").read_bytes() == whole(conn, tmp_path / "whole-3.csv")


@pytest.mark.parametrize("damage", ["rewritten", "removed", "other code", "same file"])
def test_a_previous_file_not_as_written_or_an_index_of_other_code_is_not_spliced_from(first_night, damage):
    conn, tmp_path = first_night
    previous = tmp_path / "night-1.csv"
    name = "night-2.csv"
    if damage == "rewritten":  # as an erasure leaves it: a line's bytes changed, the size kept
        data = bytearray(previous.read_bytes())
        data[-3] = ord("X")
        previous.write_bytes(bytes(data))
        os.utime(previous, ns=(previous.stat().st_atime_ns, previous.stat().st_mtime_ns + 1_000_000))
    elif damage == "removed":  # retention took it
        previous.unlink()
    elif damage == "other code":
        with kept_features.attached(conn, tmp_path, ORG) as kept:
            conn.execute(f"UPDATE {kept}.{spliced_csv.FILE_TABLE} SET stamp = 'older code'")
    else:  # the run's reports written again: the file named is the one being written
        name = "night-1.csv"
    change_a_night(conn)
    written = night(conn, tmp_path, "night-2", name)
    assert written.copied == 0
    assert (tmp_path / name).read_bytes() == whole(conn, tmp_path / "whole-2.csv")


def test_on_a_file_system_that_cannot_copy_between_files_the_lines_are_read_and_written(first_night, monkeypatch):
    conn, tmp_path = first_night

    def refused(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(spliced_csv.os, "copy_file_range", refused)
    change_a_night(conn)
    written = night(conn, tmp_path, "night-2", "night-2.csv")
    assert written.copied > written.rows * 0.8
    assert (tmp_path / "night-2.csv").read_bytes() == whole(conn, tmp_path / "whole-2.csv")
