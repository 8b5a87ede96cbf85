"""The page's dialogue editor in Chromium, against real processes (uvicorn, a worker on the tiny checkpoint,
redis-server): speakers with voices, lines, the pause between them, generate, play — and a refusal said in place."""

from __future__ import annotations

import httpx
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.service import Service
from tests.web.pages import WAIT_MS, OpenPage

DIALOGUE_PLAYABLE = """() => {
    const audio = document.querySelector('#dialogue-player');
    return audio !== null && !audio.hidden && audio.src.startsWith('blob:') && audio.readyState >= 1;
}"""


def test_speakers_lines_and_a_pause_make_one_task_whose_audio_plays(service: Service, open_page: OpenPage) -> None:
    service.start_worker("dialogue-web")
    page = open_page()
    speakers = page.locator("#dialogue-speakers li.dialogue-speaker")
    assert speakers.count() == 2 and page.locator("#dialogue-lines li.dialogue-line").count() == 2
    page.wait_for_function("() => document.querySelector('#dialogue-speakers select.speaker-voice').value !== ''")
    speakers.nth(0).locator("select").select_option("zh_female")
    speakers.nth(1).locator("select").select_option("zh_male")

    page.click("#add-speaker")
    carol = speakers.nth(2)
    carol.locator("input").fill("Carol")
    carol.locator("select").select_option("zh_female")
    page.click("#add-line")
    line = page.locator("#dialogue-lines li.dialogue-line").nth(2)
    assert line.locator("input").evaluate("input => input === document.activeElement"), "the new line takes the focus"
    line.locator("select").select_option("Carol")
    line.locator("input").fill("And I have the last word.")
    page.fill("#dialogue-gap", "300")
    page.click("#dialogue-generate")
    try:
        page.wait_for_function(DIALOGUE_PLAYABLE, timeout=WAIT_MS)
    except PlaywrightTimeout as exc:
        said = page.text_content("#dialogue-status")
        raise AssertionError(f"no dialogue audio: #dialogue-status={said!r}\n{service.logs()}") from exc
    assert page.inner_text("#dialogue-status").startswith("Done:")
    play = "async () => { const audio = document.querySelector('#dialogue-player'); await audio.play(); return audio.duration; }"
    duration = page.evaluate(play)
    assert duration > 0
    assert (page.locator("#dialogue-download").get_attribute("href") or "").startswith("blob:")

    task_id = page.evaluate("document.body.dataset.dialogueTaskId")
    cues = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", params={"format": "json"}, timeout=30).json()
    speakers_said = [cue["speaker"] for cue in cues]
    assert speakers_said == sorted(speakers_said, key=["Alice", "Bob", "Carol"].index)
    assert set(speakers_said) == {"Alice", "Bob", "Carol"}
    bob = next(cue for cue in cues if cue["speaker"] == "Bob")
    alice_end = max(cue["end"] for cue in cues if cue["speaker"] == "Alice")
    assert bob["start"] - alice_end == 7_200, "the pause between lines, as typed: 300 ms at 24 kHz"


def test_a_refused_dialogue_says_which_line_to_fix(service: Service, open_page: OpenPage) -> None:
    page = open_page()
    page.locator("#dialogue-lines li.dialogue-line").nth(1).locator("input").fill("   ")
    page.click("#dialogue-generate")
    page.wait_for_function("() => document.querySelector('#dialogue-status').classList.contains('is-error')")
    said = page.inner_text("#dialogue-status")
    assert "lines.1.text" in said and "line 2 (Bob)" in said and "text is empty" in said, said
    page.locator("#dialogue-speakers li.dialogue-speaker").nth(1).locator("button").click()
    assert page.locator("#dialogue-lines li.dialogue-line").nth(1).locator("select").input_value() == "Alice", (
        "a removed speaker's lines fall back to a speaker that is left"
    )
