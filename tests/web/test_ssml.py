"""The page's SSML input in Chromium, against real processes (uvicorn, a worker on the tiny checkpoint,
redis-server): the Text / SSML choice, a document with a break synthesised and played, a refused document's
422 said in the error area, and back to text."""

from __future__ import annotations

import io
import json
import wave
from array import array
from typing import Any

import httpx
import pytest
from playwright.sync_api import Request

from tests.support.service import Service
from tests.web.pages import OpenPage, assert_download_link, screenshot, wait_for_audio

pytestmark = pytest.mark.e2e

BREAK_SAMPLES = 12_000
"""The page's example document holds ``<break time="500ms"/>``: exactly that many zero samples at 24 kHz."""


def submitted_body(request: Request) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(request.post_data or "{}")
    return body


def longest_zero_run(wav_bytes: bytes) -> int:
    """The longest run of zero samples in a mono PCM16 WAV: speech (noise, on the tiny checkpoint) has none that long."""
    with wave.open(io.BytesIO(wav_bytes)) as reader:
        assert reader.getsampwidth() == 2 and reader.getnchannels() == 1 and reader.getframerate() == 24_000
        samples = array("h", reader.readframes(reader.getnframes()))
    longest = run = 0
    for sample in samples:
        run = run + 1 if sample == 0 else 0
        longest = max(longest, run)
    return longest


def test_an_ssml_document_with_a_break_is_sent_as_ssml_and_its_audio_plays(service: Service, open_page: OpenPage) -> None:
    service.start_worker("ssml-web")
    page = open_page()
    assert page.locator("#mode-text").is_checked() and page.locator("#ssml").is_hidden(), "plain text is the default"
    page.locator("label", has=page.locator("#mode-ssml")).click()
    assert page.locator("#ssml").is_visible() and page.locator("#text").is_hidden()
    document = page.input_value("#ssml")
    assert document.startswith("<speak>") and '<break time="500ms"/>' in document, "a valid example is prefilled"
    page.select_option("#voice", "zh_female")
    page.select_option("#format", "wav")
    with page.expect_request("**/v1/tts/submit") as submit:
        page.click("#generate")
    assert submitted_body(submit.value) == {"ssml": document, "voice": "zh_female", "speed": 5, "format": "wav", "listen": True}

    status = wait_for_audio(page, service)
    assert status["status"] == "done" and status["format"] == "wav"
    assert page.inner_text("#status").startswith("Done: "), page.inner_text("#status")
    assert page.inner_text("#error") == ""
    assert_download_link(page, status)
    play = "async () => { const audio = document.querySelector('#player'); await audio.play(); return audio.duration; }"
    assert page.evaluate(play) > 0
    result = httpx.get(f"{service.api_url}/v1/tts/result/{status['task_id']}", timeout=30)
    assert result.status_code == 200
    assert longest_zero_run(result.content) >= BREAK_SAMPLES, "the document's break was read as SSML: exact silence"
    screenshot(page, "page-ssml.png")


def test_a_refused_document_shows_the_422_and_switching_back_submits_text(service: Service, open_page: OpenPage) -> None:
    page = open_page()
    page.check("#mode-ssml")
    page.fill("#ssml", '<speak>Hello <break time="500ms"></speak>')
    with page.expect_response("**/v1/tts/submit") as response:
        page.click("#generate")
    assert response.value.status == 422
    said = str(response.value.json()["detail"][0]["msg"]).removeprefix("Value error, ")
    assert said.startswith("line 1, column ") and "not well-formed" in said, said
    page.wait_for_function("() => document.querySelector('#error').textContent !== ''")
    assert page.inner_text("#error") == f"Please fix the field — SSML: {said}"
    assert page.get_attribute("#ssml", "aria-invalid") == "true"
    assert "error" in (page.get_attribute("#ssml", "aria-describedby") or "").split()
    assert page.evaluate("document.activeElement.id") == "ssml", "focus moves to the document to fix"
    assert page.locator("#player").is_hidden() and page.locator("#download").is_hidden()

    # An element ChatTTS cannot speak is named, with the supported list; Ctrl+Enter in the document submits.
    page.fill("#ssml", "<speak><emphasis>Loud</emphasis></speak>")
    with page.expect_response("**/v1/tts/submit") as unsupported:
        page.keyboard.press("Control+Enter")
    assert unsupported.value.status == 422
    page.wait_for_function("() => document.querySelector('#error').textContent.includes('emphasis')")
    assert "<emphasis> is not supported" in page.inner_text("#error") and "supported elements" in page.inner_text("#error")

    # Back to text: the text goes, the document does not, and the document's error is cleared.
    page.check("#mode-text")
    assert page.locator("#ssml").is_hidden() and page.locator("#text").is_visible()
    page.fill("#text", "Plain text again.")
    with page.expect_response("**/v1/tts/submit") as queued:
        page.click("#generate")
    assert submitted_body(queued.value.request) == {"text": "Plain text again.", "speed": 5, "format": "wav", "listen": True}
    assert queued.value.status == 202, queued.value.text()
    assert page.inner_text("#error") == "" and page.get_attribute("#ssml", "aria-invalid") is None
