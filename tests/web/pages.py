"""What the web tests share: the browser's flags, the page factory that records what a page does,
and the waits and checks that several tests use. The fixtures are in ``tests/web/conftest.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.service import ROOT, Service

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
]
WAIT_MS = 120_000
"""Generous bound for anything that waits on the worker (tiny model on 2 CPU cores)."""

AUDIO_READY = """() => {
    const audio = document.querySelector('#player');
    return audio !== null && !audio.hidden && audio.src !== '' && audio.readyState >= 1;
}"""
NO_HORIZONTAL_OVERFLOW = "() => document.documentElement.scrollWidth <= window.innerWidth"

RECORD_CSP_VIOLATIONS = """(() => {
    // Runs before the page's own script in every document (an init script is not subject
    // to the page's policy): every violation is kept on window and reported to the test.
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (event) => {
        const violation = {
            directive: event.effectiveDirective || event.violatedDirective,
            blocked: event.blockedURI,
            source: event.sourceFile,
            line: event.lineNumber,
            sample: event.sample,
        };
        window.__cspViolations.push(violation);
        if (window.__reportCspViolation) window.__reportCspViolation(JSON.stringify(violation));
    });
})();"""
CSP_CONSOLE = re.compile(r"Content[ -]Security[ -]Policy|^Refused to ", re.IGNORECASE)


@dataclass
class OpenPage:
    """Factory: the page at ``/`` in a fresh browser context, its voice list loaded (``voices=False``:
    not waited for, as on a service that answers 401).

    Everything the pages do is recorded for the test and checked at teardown: uncaught JavaScript
    errors, Content-Security-Policy violations (events and console messages), and every request
    (``requests``; the API-key test checks their URLs and headers).
    """

    browser: Browser
    service: Service
    js_errors: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    contexts: list[BrowserContext] = field(default_factory=list)

    def __call__(self, width: int = 1280, height: int = 900, api_url: str | None = None, voices: bool = True) -> Page:
        context = self.browser.new_context(viewport={"width": width, "height": height})
        self.contexts.append(context)
        context.expose_function("__reportCspViolation", self._csp_violation)
        context.add_init_script(script=RECORD_CSP_VIOLATIONS)
        page = context.new_page()
        page.on("pageerror", lambda error: self.js_errors.append(str(error)))
        page.on("console", self._console)
        page.on("request", self._request)
        page.goto(f"{api_url or self.service.api_url}/")
        if voices:
            wait_for_voices(page)
        return page

    def _request(self, request: Request) -> None:
        self.requests.append(request)

    def _csp_violation(self, violation: str) -> None:
        self.csp_violations.append(f"securitypolicyviolation: {violation}")

    def _console(self, message: ConsoleMessage) -> None:
        if CSP_CONSOLE.search(message.text):
            self.csp_violations.append(f"console {message.type}: {message.text}")

    def check(self) -> None:
        assert not self.js_errors, f"uncaught JavaScript errors: {self.js_errors}"
        assert not self.csp_violations, f"Content-Security-Policy violations: {self.csp_violations}"

    def close(self) -> None:
        """Close this test's browser contexts (the browser itself is the session's)."""
        for context in self.contexts:
            context.close()


def wait_for_voices(page: Page) -> None:
    """The picker is filled from GET /v1/voices once the built-in voices are listed."""
    page.wait_for_selector('#voice option[value="zh_female"]', state="attached")


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def wait_for_audio(page: Page, service: Service, api_url: str | None = None, key: str | None = None) -> dict[str, Any]:
    """Wait until the final result is playable in ``<audio controls>``; return the task's status
    (read from ``api_url`` with ``key`` when given: a task submitted with a key is its key's to read)."""
    try:
        page.wait_for_function(AUDIO_READY, timeout=WAIT_MS)
    except PlaywrightTimeout as exc:
        raise AssertionError(
            f"no playable audio; #status={page.text_content('#status')!r} #error={page.text_content('#error')!r}\n" + service.logs()
        ) from exc
    task_id = str(page.evaluate("document.body.dataset.taskId"))
    if key is None:
        return service.status(task_id)
    response = httpx.get(f"{api_url or service.api_url}/v1/tts/tasks/{task_id}", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def assert_download_link(page: Page, status: dict[str, Any]) -> None:
    link = page.locator("#download")
    assert link.is_visible()
    assert (link.get_attribute("href") or "").startswith("blob:")
    text = link.inner_text()
    assert re.search(r"\d+(\.\d+)? (B|KB|MB)", text), text
    assert status["format"].upper() in text
    assert link.get_attribute("download") is not None
    assert int(link.get_attribute("data-bytes") or 0) == status["result_bytes"] > 0
