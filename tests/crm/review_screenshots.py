"""The review page's screenshots in the docs: `.venv/bin/python -m tests.crm.review_screenshots [docs/images]`.

Seeds a local service with KOLs, syncs them, plants their contacts in a Salesforce stand-in (probable matches and
planned updates, tests/crm/review_support.py), reconciles, serves the page and photographs its probable matches at
1280 and 1920 px in headless chromium (review-1280.png, review-1920.png)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.crm.review_browser import start_chrome
from tests.crm.review_support import ORG, review_org
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import sync


def main(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        service = start_service(work / "service", kols=240, random_seed=7)
        try:
            sync(service, work / "synced")
        finally:
            service.server.stop()
        with review_org(work / "synced", work / "org") as org:
            for width in (1280, 1920):
                browser = start_chrome(work / f"profile-{width}", width=width, height=1100)
                try:
                    browser.get(org.page.login_url)
                    browser.get(f"{org.page.url}/o/{ORG}/matches")
                    browser.save_screenshot(str(target / f"review-{width}.png"))
                finally:
                    browser.quit()
                print(target / f"review-{width}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
