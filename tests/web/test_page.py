"""The web page (``static/index.html``, ``static/app.js``, ``static/app.css``) driven in Debian's Chromium.

Everything is real: the ``service`` deployment (redis-server, ``uvicorn app:app``, ``python
worker.py`` on the tiny random-weight checkpoint) and a headless Chromium driven through the
``playwright`` package. The browser is the system one (``scripts/install_chromium.sh``); the
tests never run ``playwright install``. Screenshots land in ``test-artifacts/`` for review.

Every page a test opens fails the test at teardown on an uncaught JavaScript error or on any
Content-Security-Policy violation (a ``securitypolicyviolation`` event, or the console's
"Refused to ..." message). The policy itself, and the API-key flow, are tested in
``tests/web/test_security.py``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from playwright.sync_api import Request

from tests.support.service import Service
from tests.web.pages import (
    NO_HORIZONTAL_OVERFLOW,
    WAIT_MS,
    OpenPage,
    assert_download_link,
    screenshot,
    wait_for_audio,
    wait_for_voices,
)

pytestmark = pytest.mark.e2e


def submitted_body(request: Request) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.post_data or "{}")
    return body


def test_generate_with_the_mouse_streams_then_plays_and_offers_a_download(service: Service, open_page: OpenPage) -> None:
    service.start_worker("web")
    page = open_page()
    text = "Hello from the browser. [uv_break] This text is long enough for two chunks."
    page.fill("#text", text)
    page.select_option("#voice", "zh_female")
    page.fill("#speed", "6")
    page.select_option("#format", "mp3")
    with page.expect_request("**/v1/tts/submit") as submit:
        page.click("#generate")
    assert submitted_body(submit.value) == {"text": text, "voice": "zh_female", "speed": 6, "format": "mp3", "listen": True}

    status = wait_for_audio(page, service)
    assert status["status"] == "done" and status["voice"] == "zh_female" and status["format"] == "mp3"
    assert page.evaluate("document.querySelector('#player').duration") > 0
    assert_download_link(page, status)
    assert page.inner_text("#status").startswith("Done: "), page.inner_text("#status")
    assert "noise" in page.inner_text("#notice"), "the tiny model's notice is shown"
    assert page.evaluate("document.body.dataset.progressVia") == "events", "progress came from server-sent events"
    # The PCM stream ends by itself once the task is done (a finished task streams its stored result).
    page.wait_for_function("() => Number(document.body.dataset.streamedBytes || 0) > 0", timeout=WAIT_MS)
    assert int(page.evaluate("document.body.dataset.streamedBytes")) % 2 == 0, "whole PCM16 samples only"
    assert page.locator("#seed-panel").is_hidden(), "a named voice is not a random draw"
    assert page.inner_text("#error") == ""
    assert page.evaluate("window.__cspViolations") == [], "generating and playing broke no rule of the policy"
    assert page.evaluate("document.querySelector('#key-panel').open") is False, "no key asked for where none is needed"
    sent = [r.url for r in open_page.requests if "/v1/" in r.url and "authorization" in r.all_headers()]
    assert sent == [], f"without a key no request sends an Authorization header: {sent}"
    screenshot(page, "page-done.png")


def test_keyboard_only_tab_to_every_field_enter_and_space_generate(service: Service, open_page: OpenPage) -> None:
    service.start_worker("keys")
    page = open_page()
    focused = "() => document.activeElement && document.activeElement.id"

    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "mode-text", "the input choice (Text or SSML) comes first, Text chosen"
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "text", "one Tab stop for the radio group, then the text"
    page.keyboard.type("Keyboard only. 键盘。")
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "voice"
    page.keyboard.press("ArrowDown")  # first voice after "no voice"
    voice = page.eval_on_selector("#voice", "select => select.value")
    assert voice != ""
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "seed"
    page.keyboard.type("77")
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "speed"
    page.keyboard.press("ArrowLeft")
    assert page.input_value("#speed") == "4" and page.inner_text("#speed-value") == "4"
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "format"
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.input_value("#format") == "flac"
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == "generate"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none"), "the focused button shows a visible focus ring"

    with page.expect_request("**/v1/tts/submit") as submit:
        page.keyboard.press("Enter")
    expected = {"text": "Keyboard only. 键盘。", "voice": voice, "seed": 77, "speed": 4, "format": "flac", "listen": True}
    assert submitted_body(submit.value) == expected
    status = wait_for_audio(page, service)
    assert status["status"] == "done" and status["format"] == "flac" and status["seed"] == 77
    assert_download_link(page, status)

    # Tabbing on from the button reaches the player and the download link.
    reached: set[str] = set()
    for _ in range(10):
        page.keyboard.press("Tab")
        reached.add(str(page.evaluate(focused)))
        if "download" in reached:
            break
    assert {"player", "download"} <= reached, reached
    screenshot(page, "page-keyboard.png")

    # Space on the button submits too; the identical deterministic request is a cache hit (200).
    page.focus("#generate")
    with page.expect_response("**/v1/tts/submit") as response:
        page.keyboard.press(" ")
    assert response.value.status == 200 and response.value.json()["cached"] is True
    cached = wait_for_audio(page, service)
    assert cached["task_id"] != status["task_id"] and cached["result_bytes"] == status["result_bytes"]
    assert page.inner_text("#status").startswith("Done (from the cache)"), page.inner_text("#status")


def test_random_draw_shows_the_seed_and_saving_it_adds_a_named_voice(service: Service, open_page: OpenPage) -> None:
    """No worker is needed: the seed comes with the submit answer, saving a voice is an API call."""
    page = open_page()
    page.fill("#text", "A voice drawn at random.")
    assert page.input_value("#voice") == "" and page.input_value("#seed") == ""
    with page.expect_response("**/v1/tts/submit") as response:
        page.click("#generate")
    answer = response.value.json()
    assert response.value.status == 202 and answer["deterministic"] is False
    seed = answer["seed"]
    page.wait_for_selector("#seed-panel", state="visible")
    assert f"seed {seed}" in page.inner_text("#seed-info")
    assert page.inner_text("#status").startswith(("Queued", "Joined"))

    page.fill("#save-name", "my_voice-1")
    with page.expect_response("**/v1/voices") as saved:
        page.click("#save-voice")
    assert saved.value.status == 201
    voice = saved.value.json()
    assert (voice["name"], voice["kind"], voice["seed"], voice["builtin"]) == ("my_voice-1", "seed", seed, False)
    page.wait_for_selector('#voice option[value="my_voice-1"]', state="attached")
    assert page.input_value("#voice") == "my_voice-1", "the new voice is selected"
    assert "Saved" in page.inner_text("#save-status")

    # The same name again: 409, said plainly.
    page.click("#save-voice")
    page.wait_for_function("() => document.querySelector('#save-status').textContent.includes('already exists')")
    # A name with a space: the API's 422, naming the field.
    page.fill("#save-name", "not a name")
    page.click("#save-voice")
    page.wait_for_function("() => document.querySelector('#save-status').textContent.includes('Voice name')")
    assert page.get_attribute("#save-name", "aria-invalid") == "true"
    screenshot(page, "page-seed.png")
    # "Use this seed" puts the drawn seed in the seed field (and clears the voice) to keep the voice.
    page.click("#use-seed")
    assert page.input_value("#seed") == str(seed) and page.input_value("#voice") == ""

    # The voice is stored by the service: a fresh page lists it.
    page.reload()
    wait_for_voices(page)
    assert page.locator('#voice option[value="my_voice-1"]').count() == 1
    voices = httpx.get(f"{service.api_url}/v1/voices").json()
    assert "my_voice-1" in json.dumps(voices)


def test_forbidden_token_shows_the_422_naming_the_text_field(service: Service, open_page: OpenPage) -> None:
    page = open_page()
    page.fill("#text", "Hello [Stts] world")
    with page.expect_response("**/v1/tts/submit") as response:
        page.click("#generate")
    assert response.value.status == 422
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    message = page.inner_text("#error")
    assert "Text:" in message and "[Stts]" in message, message
    assert page.get_attribute("#text", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "text", "focus moves to the field to fix"
    assert page.get_attribute("#error", "role") == "alert"
    assert page.locator("#player").is_hidden() and page.locator("#download").is_hidden()
    screenshot(page, "page-error.png")

    # Fixing the text clears the error on the next submit (Ctrl+Enter in the text area submits).
    page.fill("#text", "Hello [laugh] world")
    with page.expect_response("**/v1/tts/submit") as fixed:
        page.keyboard.press("Control+Enter")
    assert fixed.value.status == 202
    assert page.inner_text("#error") == "" and page.get_attribute("#text", "aria-invalid") is None


def test_redis_outage_shows_503_with_the_time_to_retry(service: Service, open_page: OpenPage) -> None:
    page = open_page()
    service.redis.stop()
    page.fill("#text", "Nobody is listening.")
    page.fill("#seed", "5")
    with page.expect_response("**/v1/tts/submit") as response:
        page.click("#generate")
    assert response.value.status == 503
    retry_after = response.value.headers["retry-after"]
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    message = page.inner_text("#error")
    assert f"retry in {retry_after} s" in message and "unavailable" in message, message
    screenshot(page, "page-503.png")


def test_full_queue_shows_429_with_the_time_to_retry(service: Service, open_page: OpenPage) -> None:
    """A second API replica on the same Redis, with a queue limit of one job, and no worker."""
    small_queue_url = service.start_api("api-small-queue", MAX_QUEUE_DEPTH="1")
    service.submit(text="This job fills the queue.", seed=1)

    page = open_page(api_url=small_queue_url)
    page.fill("#text", "One job too many.")
    with page.expect_response("**/v1/tts/submit") as response:
        page.click("#generate")
    assert response.value.status == 429
    retry_after = response.value.headers["retry-after"]
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    message = page.inner_text("#error")
    assert "queue is full" in message and f"retry in {retry_after} s" in message, message
    screenshot(page, "page-429.png")


def test_failed_task_shows_its_error(service: Service, open_page: OpenPage) -> None:
    """Every inference of a text containing BOOM raises (fault injection); retried, then failed."""
    service.start_worker("faulty", FAULT_MODE="raise", FAULT_MATCH="BOOM", RETRY_BASE_S="1")
    page = open_page()
    page.fill("#text", "BOOM goes the inference.")
    page.fill("#seed", "9")
    page.click("#generate")
    page.wait_for_function("() => document.body.dataset.lastStatus === 'failed'", timeout=WAIT_MS)
    task_id = str(page.evaluate("document.body.dataset.taskId"))
    error = service.status(task_id)["error"]
    assert error and "injected fault" in error
    message = page.inner_text("#error")
    assert message.startswith("The synthesis failed") and error in message, message
    assert page.inner_text("#status") == "Failed."
    assert page.locator("#player").is_hidden() and page.locator("#download").is_hidden()
    screenshot(page, "page-failed.png")


def test_phone_screen_has_no_horizontal_overflow_and_polls_without_events(service: Service, open_page: OpenPage) -> None:
    """375x700, and the event stream refused (as a buffering proxy might): the page polls instead."""
    service.start_worker("phone")
    page = open_page(width=375, height=700)
    page.route("**/v1/tts/events/**", lambda route: route.abort())
    assert page.evaluate(NO_HORIZONTAL_OVERFLOW)

    # Everything on screen at once: notice, random-draw seed panel, player, download link.
    page.fill("#text", "A phone-sized screen. 手机屏幕。")
    page.click("#generate")
    status = wait_for_audio(page, service)
    page.wait_for_selector("#seed-panel", state="visible")
    assert_download_link(page, status)
    assert page.evaluate("document.body.dataset.progressVia") == "polling"
    assert page.evaluate(NO_HORIZONTAL_OVERFLOW), page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    for selector in ("#text", "#voice", "#seed", "#speed", "#format", "#generate", "#player", "#save-name"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, (selector, box)
    screenshot(page, "page-phone.png")

    # A long error message wraps instead of widening the page.
    page.fill("#text", "[Stts]" + "x" * 300)
    page.click("#generate")
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    assert page.evaluate(NO_HORIZONTAL_OVERFLOW)
    screenshot(page, "page-phone-error.png")
