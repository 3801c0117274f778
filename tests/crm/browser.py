"""Headless Chromium for the report tests: a screenshot and the DOM after the page's scripts ran.

Without chromium the tests fail when $CI is set (CI installs it) and skip elsewhere, saying how
to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL = "apt-get update && apt-get install -y chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def chromium() -> str:
    """Path of the chromium binary, or fail (CI) / skip (elsewhere)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    message = f"headless chromium is needed for the HTML report tests: {INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=60, check=True)


def screenshot(url: str, png: Path, profile: Path, size: str = "1400,2000") -> Path:
    _run([f"--screenshot={png}", f"--window-size={size}", url], profile)
    return png


def dump_dom(url: str, profile: Path, size: str = "1400,2000") -> str:
    return _run([f"--window-size={size}", "--dump-dom", url], profile).stdout
