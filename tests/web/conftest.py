"""Fixtures of the web tests: Debian's Chromium, and a page factory that fails the test at teardown
on an uncaught JavaScript error or a Content-Security-Policy violation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.support.service import Service
from tests.web.pages import CHROMIUM, CHROMIUM_FLAGS, OpenPage


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium per test file; every page gets a fresh browser context (no cookies, storage or cache shared).

    Not per session: Playwright's sync API runs an event loop in this thread for as long as it is open,
    and an asyncio test after the web files (in the same pytest-xdist process) would find it running.
    """
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the web tests need Debian's Chromium; run scripts/install_chromium.sh",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def open_page(browser: Browser, service: Service) -> Iterator[OpenPage]:
    """Opens pages (:class:`OpenPage`); uncaught JavaScript errors and CSP violations fail the test at
    teardown (HTTP error statuses that the page handles are expected and ignored)."""
    factory = OpenPage(browser, service)
    yield factory
    try:
        factory.check()
    finally:
        factory.close()
