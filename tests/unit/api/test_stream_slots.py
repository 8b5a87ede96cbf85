"""Stream caps: one caller may hold ``MAX_STREAMS_PER_KEY`` event and audio streams at once (then 429), one API process
``MAX_STREAMS`` (then 503), each with ``Retry-After``; a slot is given back when its response ends, however it ends.

Through the real app on a real Redis, with no worker: a queued task's event stream lasts until the task ends, so the
streams stay open while the test opens more. ``bench/listening/stream_storm.py`` measures what the caps are for (``/healthz``
while a thousand streams are asked for at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, cast

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_security import bearer, new_key, submit
from ttsq.api.service import TTSService
from ttsq.store.queue import JobQueue


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for the app (served in this event loop) to reach ``condition``; bounded, so a broken cap fails, not hangs."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def open_streams(app: FastAPI) -> int:
    return cast(TTSService, app.state.service).listening.stream_slots.open


async def test_streams_past_a_callers_share_are_429_past_the_process_503_and_given_back_when_they_end(
    redis: Redis, make_settings: Any
) -> None:
    settings = make_settings(auth="on", max_streams=3, max_streams_per_key=2, retry_after_s=7)
    async with api_client(settings) as (client, app):
        alice, bob = await new_key(redis, "tts"), await new_key(redis, "tts")
        task = (await submit(client, alice)).json()["task_id"]
        other = (await submit(client, bob, seed=2)).json()["task_id"]

        def events(key: str, task_id: str) -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(client.get(f"/v1/tts/events/{task_id}", headers=bearer(key)))

        held = [events(alice, task), events(alice, task)]
        await until(lambda: open_streams(app) == 2, "alice's two streams are open")
        third = await client.get(f"/v1/tts/stream/{task}", headers=bearer(alice))
        assert third.status_code == 429 and third.headers["retry-after"] == "7", third.text
        assert "MAX_STREAMS_PER_KEY=2" in third.json()["detail"]
        depth = await JobQueue(redis, queue_config()).depth()
        speech = await client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": "Hi.", "voice": "alloy"}, headers=bearer(alice)
        )
        assert speech.status_code == 429 and speech.json()["error"]["type"] == "rate_limit_error"
        assert await JobQueue(redis, queue_config()).depth() == depth, "a refused speech request queues nothing"

        bobs = events(bob, other)
        await until(lambda: open_streams(app) == 3, "the process holds its three streams")
        full = await client.get(f"/v1/tts/stream/{other}", headers=bearer(bob))
        assert full.status_code == 503 and full.headers["retry-after"] == "7" and "MAX_STREAMS" in full.json()["detail"]

        held[0].cancel()  # a client that goes away gives its slot back
        with contextlib.suppress(asyncio.CancelledError):
            await held[0]
        await until(lambda: open_streams(app) == 2, "the abandoned stream's slot is back")
        assert (await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(alice))).status_code == 200
        ended = await held[1]  # the task ended, so did its stream
        statuses = [json.loads(line[6:])["status"] for line in ended.text.splitlines() if line.startswith("data: ")]
        assert statuses == ["queued", "cancelled"]
        await until(lambda: open_streams(app) == 1, "an ended stream's slot is back")

        assert '"status": "cancelled"' in (await client.get(f"/v1/tts/events/{task}", headers=bearer(alice))).text
        assert (await client.get(f"/v1/tts/events/{task}.nope", headers=bearer(alice))).status_code == 404
        assert open_streams(app) == 1, "short answers (a finished task, an unknown one) hold no slot afterwards"
        assert (await client.delete(f"/v1/tts/tasks/{other}", headers=bearer(bob))).status_code == 200
        await bobs
        await until(lambda: open_streams(app) == 0, "every slot is back")
