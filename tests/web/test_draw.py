"""The page's "Draw voices" panel in Chromium, against real processes (uvicorn with AUTH=on, a worker on the tiny
checkpoint, redis-server): enter an admin key, draw, play a preview, save it, find it in the voice list."""

from __future__ import annotations

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.service import Service
from tests.web.pages import WAIT_MS, OpenPage, wait_for_voices

PREVIEW_PLAYABLE = """() => {
    const audio = document.querySelector('#draw-list li audio');
    return audio !== null && audio.src.startsWith('blob:') && audio.readyState >= 1;
}"""


def test_draw_play_and_save_a_voice_with_an_admin_key(service: Service, open_page: OpenPage) -> None:
    api_url = service.start_api("api-draw", AUTH="on")
    key = service.create_key("page-draw", "tts,admin")
    service.start_worker("draw-web")
    page = open_page(api_url=api_url, voices=False)
    page.wait_for_function("() => document.querySelector('#key-panel').open")
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")
    wait_for_voices(page)

    page.fill("#draw-n", "2")
    page.select_option("#draw-language", "en")
    page.click("#draw")
    try:
        page.wait_for_selector("#draw-list li.draw-candidate >> nth=1", timeout=WAIT_MS)
        page.wait_for_function(PREVIEW_PLAYABLE, timeout=WAIT_MS)
    except PlaywrightTimeout as exc:
        raise AssertionError(f"no drawn voices: #draw-status={page.text_content('#draw-status')!r}\n{service.logs()}") from exc
    assert "2 voices drawn, most different first" in page.inner_text("#draw-status")
    first = page.locator("#draw-list li.draw-candidate").first
    seed = first.get_attribute("data-seed")
    assert seed is not None and f"Seed {seed} — distance" in first.inner_text()
    assert "the nearest voice" in first.inner_text()
    # The preview plays: the audio element loads it (its duration is known) and starts.
    duration = page.evaluate("""async () => {
        const audio = document.querySelector('#draw-list li audio');
        await audio.play();
        return audio.duration;
    }""")
    assert duration > 0

    first.locator("input").fill("picked")
    first.locator("button").click()
    page.wait_for_selector('#voice option[value="picked"]', state="attached", timeout=WAIT_MS)
    assert page.locator('#voice option[value="picked"]').inner_text() == f"picked (seed {seed})"
    assert "Saved as “picked”" in first.inner_text()
