"""Long-polls: ``GET /v1/tts/tasks/{id}?wait=S`` and ``GET /v1/tts/result/{id}?wait=S`` on a real redis-server.

The job is ended by the queue's own scripts (as a worker ends it); the API's deadline runs on a clock each test
sets, so no test depends on how fast anything runs: with a clock that never moves, a wait can only end because
the task did (a missed end would hang, and ``asyncio.wait_for`` turns that into a failure).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import FakeClock, api_client, claimed, queue_config
from tests.unit.api.test_query import queued_task
from ttsq.client.sdk import LONG_POLL_S, AsyncTTSClient
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue

HANG_GUARD_S = 60
"""Only a hang reaches it: with a frozen clock a wait that missed the task's end would never return."""


@pytest.fixture
async def app(redis: Redis, make_settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(block_s=0.2)) as (http, app):
        app.state.service.tasks.monotonic = FakeClock()  # frozen: only the task's end returns a wait
        yield http, app


async def blocked_on_stream(redis: Redis) -> None:
    """Until a client of the API is parked in a blocking ``XREAD`` (the long-poll's wait), as Redis reports it."""
    while not any(c.get("cmd") == "xread" for c in await redis.client_list()):  # noqa: ASYNC110 - Redis's state, not ours
        await asyncio.sleep(0.01)


async def ended_while_waiting(
    redis: Redis, request: Awaitable[httpx.Response], end: Callable[[], Awaitable[Any]]
) -> httpx.Response:
    waiting = asyncio.ensure_future(request)
    await blocked_on_stream(redis)
    assert not waiting.done()
    await end()
    return await asyncio.wait_for(waiting, HANG_GUARD_S)


async def run_and_complete(queue: JobQueue) -> None:
    """What a worker does to the next queued job, through the queue's own scripts: claim it, store its result."""
    held = await claimed(queue)
    await queue.leases.complete(held.job, b"RIFFaudio", "audio/wav", 1.5, 0.1, cache_key=None)


async def test_status_wait_returns_when_the_task_completes(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, _ = app
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)

    async def complete() -> None:
        await queue.leases.complete(held.job, b"RIFFaudio", "audio/wav", 1.5, 0.1, cache_key=None)

    response = await ended_while_waiting(redis, client.get(f"/v1/tts/tasks/{task_id}", params={"wait": 30}), complete)
    assert response.status_code == 200 and response.json()["status"] == "done"


async def test_result_wait_returns_the_audio_when_the_task_completes(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, _ = app
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())

    response = await ended_while_waiting(
        redis, client.get(f"/v1/tts/result/{task_id}", params={"wait": 30}), partial(run_and_complete, queue)
    )
    assert response.status_code == 200 and response.content == b"RIFFaudio"


async def test_wait_returns_when_a_queued_task_is_cancelled(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, _ = app
    task_id = await queued_task(client)

    async def cancel() -> None:
        assert (await client.delete(f"/v1/tts/tasks/{task_id}")).status_code == 200

    response = await ended_while_waiting(redis, client.get(f"/v1/tts/result/{task_id}", params={"wait": 30}), cancel)
    assert response.status_code == 409 and response.json()["status"] == "cancelled"


async def test_wait_sees_a_final_failure_which_writes_no_end_marker(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, _ = app
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)

    async def fail() -> None:
        await queue.leases.fail(held.job, "inference failed: boom", retryable=False, cache_key=None)

    response = await ended_while_waiting(redis, client.get(f"/v1/tts/tasks/{task_id}", params={"wait": 30}), fail)
    assert response.json()["status"] == "failed" and response.json()["error"] == "inference failed: boom"


class SteppingClock:
    """Each reading is ``step`` seconds after the last: a wait's deadline passes after a known number of readings."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def test_wait_answers_the_current_status_at_its_deadline(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, fastapi_app = app
    task_id = await queued_task(client)
    fastapi_app.state.service.tasks.monotonic = SteppingClock(10.0)  # 30 s pass in a few readings, with one blocking read
    status = await asyncio.wait_for(client.get(f"/v1/tts/tasks/{task_id}", params={"wait": 30}), HANG_GUARD_S)
    assert status.status_code == 200 and status.json()["status"] == "queued"
    result = await asyncio.wait_for(client.get(f"/v1/tts/result/{task_id}", params={"wait": 30}), HANG_GUARD_S)
    assert result.status_code == 202 and result.json()["status"] == "queued" and int(result.headers["retry-after"]) >= 1


async def test_a_wait_is_capped_by_max_wait_s(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(max_wait_s=0, refine_wait_s=0)) as (client, app):
        app.state.service.tasks.monotonic = FakeClock()  # frozen: an uncapped wait on a queued task would never return
        task_id = await queued_task(client)
        status = await asyncio.wait_for(client.get(f"/v1/tts/tasks/{task_id}", params={"wait": 30}), HANG_GUARD_S)
        assert status.json()["status"] == "queued"


@pytest.mark.parametrize("wait", ["-1", "soon", "nan", "inf"])
async def test_a_bad_wait_is_422_naming_the_field(client: httpx.AsyncClient, wait: str) -> None:
    task_id = await queued_task(client)
    for path in ("tasks", "result"):
        response = await client.get(f"/v1/tts/{path}/{task_id}", params={"wait": wait})
        assert response.status_code == 422, (path, wait)
        assert response.json()["detail"][0]["loc"] == ["query", "wait"]


class Recording(httpx.AsyncBaseTransport):
    """The real app's ASGI transport, keeping every request the client sent."""

    def __init__(self, app: FastAPI) -> None:
        self.inner, self.requests = httpx.ASGITransport(app=app), list[httpx.Request]()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)


async def test_the_client_waits_with_one_long_poll_not_repeated_polls(app: tuple[httpx.AsyncClient, FastAPI], redis: Redis) -> None:
    client, fastapi_app = app
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    transport = Recording(fastapi_app)
    async with AsyncTTSClient("http://ttsq.test", transport=transport) as tts:
        waiting = asyncio.ensure_future(tts.wait(task_id))
        await blocked_on_stream(redis)
        await run_and_complete(queue)
        status = await asyncio.wait_for(waiting, HANG_GUARD_S)
    assert status.status == "done"
    # The API's clock is frozen: a status request that did not wait would have answered "queued" and been repeated.
    assert [r.url.params["wait"] for r in transport.requests] == [str(LONG_POLL_S)]


async def test_a_long_poll_ends_with_401_once_its_key_is_revoked_not_with_the_audio(redis: Redis, make_settings: Any) -> None:
    """A long-poll rechecks its key every ``STREAM_KEY_RECHECK_S`` (on the wait's own clock, frozen here and moved by the
    test): revoked meanwhile, the wait ends with 401 — it used to go on, and hand over the audio once the task ended."""
    async with api_client(make_settings(auth="on", block_s=0.2, stream_key_recheck_s=5)) as (client, app):
        clock = FakeClock()
        app.state.service.tasks.monotonic = clock
        store = ApiKeyStore(redis, Keys("ttsq"))
        key, record = await store.create("listener", ["tts"])
        headers = {"Authorization": f"Bearer {key}"}
        task_id = (await client.post("/v1/tts/submit", json={"text": "hello", "seed": 3}, headers=headers)).json()["task_id"]
        waiting = asyncio.ensure_future(client.get(f"/v1/tts/result/{task_id}", params={"wait": 30}, headers=headers))
        await blocked_on_stream(redis)
        assert await store.revoke(record.id)
        clock.advance(5)  # the recheck is due; the frozen deadline is not
        answer = await asyncio.wait_for(waiting, HANG_GUARD_S)
        assert answer.status_code == 401 and "revoked" in answer.json()["detail"], answer.text
        await run_and_complete(JobQueue(redis, queue_config()))
        again = await client.get(f"/v1/tts/result/{task_id}", params={"wait": 30}, headers=headers)
        assert again.status_code == 401, "and a new request with the revoked key is refused at once, as before"
