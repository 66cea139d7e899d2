"""A self-contained HTML page opened in headless Chromium, for the report tests: the page and the script
errors it logged (console errors and uncaught exceptions)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs the Debian package)")


@contextmanager
def opened_page(path: Path, **page_options: Any) -> Iterator[tuple[Any, list[str]]]:
    """``path`` loaded in a fresh headless Chromium page; yields (page, errors); the browser closes after."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(**page_options)
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        try:
            yield page, errors
        finally:
            browser.close()
