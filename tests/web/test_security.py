"""The web page's security: a Content-Security-Policy that it never breaks, and API keys.

The page is served with a strict policy (no inline script or style, connections to its own origin
only). These tests check that the HTML and its script hold nothing the policy forbids, that the
policy and the other hardening headers are on every page file, and that Chromium enforces it
(a violation on purpose is caught; the page's own runs, in every web test, cause none).

The API-key flow runs against a second API process with ``AUTH=on`` and keys made by the
operator's command (``python -m ttsq keys create``): without a key the page asks for one; with it,
every API request carries ``Authorization: Bearer`` and no URL ever holds the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, Request

from tests.support.service import Service
from tests.web.pages import OpenPage, assert_download_link, screenshot, wait_for_audio, wait_for_voices

pytestmark = pytest.mark.e2e

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HARDENING_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
PAGE_FILES = {"/": "text/html", "/static/app.js": "javascript", "/static/app.css": "text/css"}
"""Every file of the page, and what its Content-Type must say (``nosniff`` trusts it)."""

FORBIDDEN_IN_SCRIPT = {
    r"\beval\s*\(": "eval()",
    r"\bnew\s+Function\s*\(": "new Function()",
    r"\bset(Timeout|Interval)\s*\(\s*[\"'`]": "a timer given a string",
    r"\.(inner|outer)HTML\b": "innerHTML/outerHTML (markup with handlers or styles)",
    r"\binsertAdjacentHTML\b": "insertAdjacentHTML",
    r"\bdocument\.write": "document.write",
    r"setAttribute\(\s*[\"'](style|on\w+)[\"']": "an inline style or handler attribute",
    r"\bnew\s+EventSource\b": "EventSource (it cannot send the API key)",
    r"\blocalStorage\b": "localStorage (the key belongs in sessionStorage only)",
}
KEY_STORAGE = "ttsq.apiKey"
COMMENTS = re.compile(r"/\*.*?\*/|(?:^|(?<=\s))//[^\n]*", re.DOTALL | re.MULTILINE)
"""JavaScript comments (block, and line comments that start a line or follow a space): what the script says about
itself is not what it does."""


class InlineCode(HTMLParser):
    """Collects what a strict policy would block in an HTML document, and the files it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self.scripts: list[str] = []
        self.stylesheets: list[str] = []
        self.key_field_named: bool | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            if values.get("src"):
                self.scripts.append(str(values["src"]))
            else:
                self.inline.append(f"<script> without src at line {self.getpos()[0]}")
        if tag == "style":
            self.inline.append(f"<style> at line {self.getpos()[0]}")
        if tag == "link" and "stylesheet" in (values.get("rel") or "").split():
            self.stylesheets.append(str(values.get("href")))
        if values.get("id") == "api-key":
            self.key_field_named = "name" in values
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.inline.append(f"<{tag} {name}=...> at line {self.getpos()[0]}")
            if value is not None and value.strip().lower().startswith("javascript:"):
                self.inline.append(f"<{tag} {name}={value!r}> at line {self.getpos()[0]}")


def test_page_has_no_inline_code_and_is_served_with_the_policy(service: Service, open_page: OpenPage) -> None:
    files = {path: httpx.get(f"{service.api_url}{path}") for path in PAGE_FILES}
    for path, response in files.items():
        assert response.status_code == 200, (path, response.status_code)
        assert PAGE_FILES[path] in response.headers["content-type"], (path, response.headers["content-type"])
        served = {name: response.headers.get(name) for name in HARDENING_HEADERS}
        assert served == HARDENING_HEADERS, f"{path} is served with {served}"

    parser = InlineCode()
    parser.feed(files["/"].text)
    parser.close()
    assert parser.inline == [], f"the page holds code the policy blocks: {parser.inline}"
    assert parser.scripts == ["/static/app.js"] and parser.stylesheets == ["/static/app.css"]
    assert parser.key_field_named is False, "the key field has no name: no form submission can carry it into a URL"
    script = COMMENTS.sub("", files["/static/app.js"].text)
    assert "sessionStorage" in script and "Authorization" in script, "comments only were removed"
    found = [what for pattern, what in FORBIDDEN_IN_SCRIPT.items() if re.search(pattern, script)]
    assert found == [], f"static/app.js uses {found}"

    # Chromium enforces the policy: an inline style attribute and an inline script added on purpose are
    # refused, and reported to the listener that every web test relies on.
    page = open_page()
    assert page.evaluate("window.__cspViolations") == [], "loading the page and its voices broke no rule"
    page.evaluate("""() => {
        const styled = document.createElement('div');
        styled.setAttribute('style', 'color: red');
        document.body.append(styled);
        const script = document.createElement('script');
        script.textContent = 'window.__inlineRan = true';
        document.body.append(script);
    }""")
    page.wait_for_function("() => window.__cspViolations.length >= 2")
    directives = sorted(v["directive"] for v in page.evaluate("window.__cspViolations"))
    assert directives == ["script-src-elem", "style-src-attr"], directives
    assert page.evaluate("window.__inlineRan") is None, "the inline script did not run"
    # Those two were on purpose: the fixture's check at teardown looks for any others.
    open_page.csp_violations.clear()


def test_event_stream_parser_reads_any_line_ending_and_any_chunking(service: Service, open_page: OpenPage) -> None:
    """The page reads ``/v1/tts/events`` with fetch() (EventSource cannot send the key): its parser must
    follow the text/event-stream rules whatever the network does to the bytes."""
    stream = (
        ": a comment, then CRLF lines\r\n"
        'event: status\r\ndata: {"status": "queued", "queue_position": 0}\r\n\r\n'
        'event: status\ndata: {"status": "running", "error": "é€😀"}\n\n'
        "event: other\ndata:x\n\n"
        'data: {"a":\ndata: 1}\n\n'
        'event: status\rdata: {"status": "done"}\r\r'
        "data: never ends"
    )
    expected = [
        {"type": "status", "data": '{"status": "queued", "queue_position": 0}'},
        {"type": "status", "data": '{"status": "running", "error": "é€😀"}'},
        {"type": "other", "data": "x"},
        {"type": "message", "data": '{"a":\n1}'},
        {"type": "status", "data": '{"status": "done"}'},
    ]
    page = open_page()
    parse = """async ([text, size]) => {
        const bytes = new TextEncoder().encode(text);
        const stream = new ReadableStream({
            start(controller) {
                for (let i = 0; i < bytes.length; i += size) controller.enqueue(bytes.slice(i, i + size));
                controller.close();
            },
        });
        const events = [];
        await readEvents(stream, (event) => events.push(event));
        return events;
    }"""
    for size in (1, 2, 3, 7, len(stream.encode()) + 1):  # byte by byte (splits CRLF and UTF-8), ..., all at once
        assert page.evaluate(parse, [stream, size]) == expected, f"chunks of {size} bytes"


@dataclass
class Phase:
    """From request ``start`` on, the page holds ``key`` (None: no key)."""

    start: int
    key: str | None


def enter_key(page: Page, key: str) -> None:
    """Type the key in the (open) key panel and press Enter, as a keyboard user would."""
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")


def focused(page: Page) -> str:
    return str(page.evaluate("document.activeElement && document.activeElement.id"))


def api_requests(requests: list[Request], api_url: str) -> list[Request]:
    """The page's calls to the API (not the page's own files, which need no key)."""
    return [request for request in requests if request.url.startswith(f"{api_url}/v1/")]


def test_api_key_is_asked_for_kept_in_the_session_and_sent_on_every_request(service: Service, open_page: OpenPage) -> None:
    api_url = service.start_api("api-keys", AUTH="on")
    key = service.create_key("page-test", "tts,admin")
    tts_only = service.create_key("page-test-tts", "tts")
    service.start_worker("keys-web")

    # Without a key the voice list is refused (401): the page opens the key panel, says why, focuses the field.
    page = open_page(api_url=api_url, voices=False)
    phases = [Phase(0, None)]
    page.wait_for_function("() => document.querySelector('#key-status').textContent !== ''")
    assert page.evaluate("document.querySelector('#key-panel').open") is True
    assert "This service needs an API key" in page.inner_text("#key-status")
    assert "needs an API key" in page.inner_text("#voice-hint")
    assert focused(page) == "api-key"
    assert page.inner_text("#key-state") == "(none)"
    screenshot(page, "page-key-prompt.png")

    # Generate without a key: the 401 is said in the alert, and the focus goes to the key field.
    page.fill("#text", "Keys, please.")
    with page.expect_response(f"{api_url}/v1/tts/submit") as refused:
        page.click("#generate")
    assert refused.value.status == 401
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    assert page.inner_text("#error").startswith("This service needs an API key"), page.inner_text("#error")
    assert focused(page) == "api-key"

    # A key the server does not know: refused, said, the field marked invalid and kept focused.
    phases.append(Phase(len(open_page.requests), "ttsq_not-a-real-key"))
    with page.expect_response(f"{api_url}/v1/voices") as voices:
        enter_key(page, "ttsq_not-a-real-key")
    assert voices.value.status == 401
    page.wait_for_function("() => document.querySelector('#key-status').textContent.includes('refused')")
    assert page.get_attribute("#api-key", "aria-invalid") == "true" and focused(page) == "api-key"

    # The real key: the voices load, the focus returns to Generate, the alert is cleared.
    phases.append(Phase(len(open_page.requests), key))
    enter_key(page, key)
    wait_for_voices(page)
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'generate'")
    assert page.inner_text("#error") == "" and page.get_attribute("#api-key", "aria-invalid") is None
    assert page.inner_text("#key-state") == "(set for this tab)"
    assert page.evaluate(f"sessionStorage.getItem('{KEY_STORAGE}')") == key
    assert page.evaluate("localStorage.length") == 0 and page.evaluate("document.cookie") == ""

    # Generation end to end with the key: events (read with fetch), the PCM stream, the download.
    page.select_option("#voice", "zh_female")
    with page.expect_response(f"{api_url}/v1/tts/submit") as submitted:
        page.click("#generate")
    assert submitted.value.status == 202, submitted.value.text()
    status = wait_for_audio(page, service, api_url=api_url, key=key)
    assert status["status"] == "done" and status["voice"] == "zh_female"
    assert_download_link(page, status)
    assert page.evaluate("document.body.dataset.progressVia") == "events", "the event stream took the key too"
    page.wait_for_function("() => Number(document.body.dataset.streamedBytes || 0) > 0")
    assert page.inner_text("#error") == ""
    screenshot(page, "page-key-done.png")

    # The key lasts for the tab's session: a reload sends it from the start, no prompt.
    page.reload()
    wait_for_voices(page)
    assert page.inner_text("#key-state") == "(set for this tab)" and page.inner_text("#key-status") == ""

    # A key without the admin scope may generate but not save a voice: the 403 names the scope.
    phases.append(Phase(len(open_page.requests), tts_only))
    page.click("#key-summary")
    enter_key(page, tts_only)
    page.wait_for_function("() => document.querySelector('#key-status').textContent.startsWith('Key set')")
    page.select_option("#voice", "")
    page.fill("#text", "A random voice, not to be saved.")
    page.click("#generate")
    page.wait_for_selector("#seed-panel", state="visible")
    page.fill("#save-name", "not_allowed")
    with page.expect_response(f"{api_url}/v1/voices") as saved:
        page.click("#save-voice")
    assert saved.value.status == 403
    page.wait_for_function("() => document.querySelector('#save-status').textContent !== ''")
    assert "This key may not do that (needs the admin scope)" in page.inner_text("#save-status"), page.inner_text("#save-status")
    screenshot(page, "page-key-403.png")

    # Every API request carried exactly the key the page held then (none before one was entered),
    # as a bearer token; no URL, and no request body, ever held a key.
    paths = {urlsplit(request.url).path for request in api_requests(open_page.requests, api_url)}
    for part in ("/v1/voices", "/v1/tts/submit", "/v1/tts/events/", "/v1/tts/stream/", "/v1/tts/result/"):
        assert any(path.startswith(part) for path in paths), f"no request to {part}: {sorted(paths)}"
    calls = {id(request) for request in api_requests(open_page.requests, api_url)}
    for index, request in enumerate(open_page.requests):
        if id(request) not in calls:
            continue
        held = next(phase.key for phase in reversed(phases) if phase.start <= index)
        sent = request.all_headers().get("authorization")
        assert sent == (f"Bearer {held}" if held else None), f"{request.method} {request.url}: sent {sent!r}"
    for request in open_page.requests:
        for secret in (key, tts_only):
            assert secret not in request.url, f"a key in {request.url}"
            assert secret not in (request.post_data or ""), f"a key in the body of {request.url}"
    assert all(secret not in page.url for secret in (key, tts_only))
    assert json.dumps(page.evaluate("Object.keys(sessionStorage)")) == json.dumps([KEY_STORAGE])
