"""One tenant cannot take every stream slot of a process: its keys together hold at most ``MAX_STREAMS_PER_TENANT``
(then 429 naming the limit), another tenant still opens its streams, and ``/metrics`` shows the slots by state.

Through the real app on a real Redis with no worker (``NO_WORKER_S`` off, as in every in-process test): a queued
task's event stream lasts until the task ends, so the streams stay open while the test opens more. Realtime sessions
count against the same limits (``tests/e2e/test_stream_limits.py``, over a real uvicorn).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from redis.asyncio import Redis

from tests.conftest import api_client
from tests.integration.api.test_security import bearer, submit
from tests.unit.api.test_stream_slots import open_streams, until
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.keys import Keys

HANG_GUARD_S = 60
"""Only a stream that was let through reaches it (a queued task's stream lasts until the task ends)."""


async def key(redis: Redis, tenant: str | None = None, scopes: tuple[str, ...] = ("tts",)) -> str:
    created, _ = await ApiKeyStore(redis, Keys("ttsq")).create("test", list(scopes), tenant=tenant)  # type: ignore[arg-type]
    return created


def metric(text: str, line_start: str) -> float:
    return float(next(line for line in text.splitlines() if line.startswith(line_start)).rsplit(" ", 1)[1])


async def test_a_tenants_keys_together_hold_at_most_its_share_and_another_tenant_still_streams(
    redis: Redis, make_settings: Any
) -> None:
    settings = make_settings(auth="on", max_streams=6, max_streams_per_key=2, max_streams_per_tenant=3, retry_after_s=7)
    async with api_client(settings) as (client, app):
        acme = [await key(redis, "acme") for _ in range(4)]
        other = await key(redis)
        tasks = {caller: (await submit(client, caller, seed=n)).json()["task_id"] for n, caller in enumerate([*acme, other])}
        held: list[asyncio.Task[httpx.Response]] = []

        def events(caller: str, task_id: str) -> None:
            held.append(asyncio.create_task(client.get(f"/v1/tts/events/{task_id}", headers=bearer(caller))))

        for caller in (acme[0], acme[0], acme[1]):
            events(caller, tasks[caller])
        await until(lambda: open_streams(app) == 3, "acme's three streams are open")
        for caller in acme[1:]:
            refused = await asyncio.wait_for(client.get(f"/v1/tts/stream/{tasks[caller]}", headers=bearer(caller)), HANG_GUARD_S)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "7", refused.text
            assert "MAX_STREAMS_PER_TENANT=3" in refused.json()["detail"]
        long_poll = await client.get(f"/v1/tts/tasks/{tasks[acme[3]]}", params={"wait": 1}, headers=bearer(acme[3]))
        assert long_poll.status_code == 429, "a long-poll holds a slot of its tenant too"

        events(other, tasks[other])  # the other tenant is not locked out
        await until(lambda: open_streams(app) == 4, "the other tenant's stream is open")

        scraper = await key(redis, scopes=("metrics",))
        scraped = (await client.get("/metrics", headers=bearer(scraper))).text
        assert metric(scraped, 'ttsq_stream_slots{state="in_use"}') == 4
        assert metric(scraped, 'ttsq_stream_slots{state="free"}') == 2
        assert metric(scraped, 'ttsq_stream_slots_held{kind="events"}') == 4
        assert metric(scraped, 'ttsq_stream_slots_held{kind="session"}') == 0
        assert metric(scraped, 'ttsq_stream_slots_tenant{tenant="tenant:acme"}') == 3

        await _close(held[0])
        await until(lambda: open_streams(app) == 3, "a closed stream gives its tenant's slot back")
        events(acme[2], tasks[acme[2]])
        await until(lambda: open_streams(app) == 4, "so acme may open another")
        for stream in held[1:]:
            await _close(stream)
        await until(lambda: open_streams(app) == 0, "every slot is back")


async def _close(stream: asyncio.Task[httpx.Response]) -> None:
    stream.cancel()  # the client goes away
    with contextlib.suppress(asyncio.CancelledError):
        await stream


async def test_the_tenant_series_are_bounded_whatever_the_number_of_tenants(redis: Redis, make_settings: Any) -> None:
    settings = make_settings(max_streams=40, max_streams_per_key=2)
    async with api_client(settings) as (client, app):
        slots = app.state.service.listening.stream_slots
        releases = [slots.take(f"key:{n}", f"key:{n}", "events") for n in range(12)]
        releases += [slots.take("key:0", "key:0", "audio")]
        scraped = (await client.get("/metrics")).text
        named = [line for line in scraped.splitlines() if line.startswith("ttsq_stream_slots_tenant{")]
        assert len(named) == 11, named  # the ten holding most, and "other"
        assert metric(scraped, 'ttsq_stream_slots_tenant{tenant="key:0"}') == 2
        assert metric(scraped, 'ttsq_stream_slots_tenant{tenant="other"}') == 2
        for release in releases:
            release()
