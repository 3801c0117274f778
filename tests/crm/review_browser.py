"""Selenium over Debian's headless chromium and chromium-driver, for the review page's tests and screenshots.

Without them the tests fail when $CI is set (CI installs them) and skip elsewhere, saying how to install them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.crm.browser import FLAGS

INSTALL = "apt-get update && apt-get install -y chromium chromium-driver"


def binaries() -> tuple[str, str] | None:
    """(chromium, chromedriver), or None when either is missing."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    return (browser, driver) if browser and driver else None


def require() -> tuple[str, str]:
    found = binaries()
    if found is None:
        message = f"headless chromium and chromium-driver are needed for the review page tests: {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def start_chrome(profile: Path, width: int = 1280, height: int = 1000, binaries_found: tuple[str, str] | None = None):
    """A headless chromium with a fresh profile, driven through chromium-driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = binaries_found or require()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)
