"""The real browser the page tests drive: Debian's Chromium through Playwright, headless."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@contextmanager
def launched() -> Iterator[Any]:
    """A headless Chromium, closed (and Playwright stopped) on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True,
                                    args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()
