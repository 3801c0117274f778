"""A Postgres URL that libpq cannot parse (a bad %-escape in the password) stops a command with one
line naming the setting, its password masked: libpq's own message quotes the malformed part."""

from __future__ import annotations

import pytest

from tests.pipeline.test_orgs import commops, one_line

BAD_ESCAPE_URL = "postgresql://u:pa%zzss@127.0.0.1:9/db"


@pytest.mark.parametrize(("setting", "command"), [
    ("COMMOPS_INBOX_URL", ["receiver", "run", "--port", "0"]),
    ("COMMOPS_INBOX_URL", ["events", "status"]),
    ("COMMOPS_ORGS_URL", ["orgs", "list"]),
])
def test_a_postgres_url_with_a_bad_escape_fails_in_one_line_with_the_password_masked(tmp_path, setting, command):
    result = commops(*command, env={setting: BAD_ESCAPE_URL, "COMMOPS_DATA_DIR": str(tmp_path / "data")}, timeout=120)
    line = one_line(result)
    assert f"{setting}: cannot connect to postgresql://127.0.0.1:9/db (invalid dsn: " in line, line
    assert "zzss" not in result.stdout + result.stderr and "***" in line
