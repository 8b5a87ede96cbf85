"""No worker, no silent wait: a stream, a long-poll or an OpenAI speech request on a job that no worker is alive to run
is answered ``no_worker`` (503 with ``Retry-After`` before its response starts; an ``error`` event once it has).

Through the real app on a real Redis. "Alive" is a worker's heartbeat within ``NO_WORKER_S``, written here as a worker
writes it (:meth:`ttsq.store.heartbeats.Heartbeats.write`) and taken away as a stopping worker takes it away
(:meth:`~ttsq.store.heartbeats.Heartbeats.remove`). The watch itself (one shared read, a Redis outage is not "no
worker") is tested on a fake clock in ``tests/unit/api/test_worker_watch.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.unit.api.test_query import queued_task
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue

HANG_GUARD_S = 60
"""Only a wait that never ends reaches it (the answer it waits for comes from the app's own checks)."""

WINDOW_S = 5


def heartbeats(redis: Redis) -> Heartbeats:
    queue = JobQueue(redis, queue_config())
    return Heartbeats(redis, queue.shards, 15, queue.clock)


@pytest.fixture
async def app(redis: Redis, make_settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(make_settings(no_worker_s=WINDOW_S, retry_after_s=7)) as (client, _):
        yield client


def refused(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "7"
    body: dict[str, Any] = response.json()
    return body


async def test_with_no_worker_alive_every_wait_on_a_job_is_503_no_worker_before_it_starts(
    app: httpx.AsyncClient, redis: Redis
) -> None:
    task_id = await queued_task(app)
    for path in (f"/v1/tts/stream/{task_id}", f"/v1/tts/events/{task_id}"):
        body = refused(await asyncio.wait_for(app.get(path), HANG_GUARD_S))
        assert body["code"] == "no_worker" and "NO_WORKER_S" in body["detail"], body
    for path in (f"/v1/tts/tasks/{task_id}", f"/v1/tts/result/{task_id}"):
        body = refused(await asyncio.wait_for(app.get(path, params={"wait": 20}), HANG_GUARD_S))
        assert body["code"] == "no_worker", body
    assert (await app.get(f"/v1/tts/tasks/{task_id}")).json()["status"] == "queued", "a plain lookup still answers"

    speech = await asyncio.wait_for(
        app.post("/v1/audio/speech", json={"model": "tts-1", "input": "Nobody will say this.", "voice": "alloy"}), HANG_GUARD_S
    )
    error = refused(speech)["error"]
    assert error["code"] == "no_worker" and error["type"] == "server_error", error
    queue = JobQueue(redis, queue_config())
    assert await queue.depth() == 1, "the speech request's job is not left queued for nobody (only the first task waits)"

    assert (await app.delete(f"/v1/tts/tasks/{task_id}")).status_code == 200
    ended = await asyncio.wait_for(app.get(f"/v1/tts/events/{task_id}"), HANG_GUARD_S)
    assert ended.status_code == 200 and '"cancelled"' in ended.text, "a task that has ended needs no worker"


async def test_a_live_worker_lets_them_wait_and_its_going_ends_them_with_no_worker(app: httpx.AsyncClient, redis: Redis) -> None:
    beats = heartbeats(redis)
    await beats.write("w1", {"worker_id": "w1"})
    task_id = await queued_task(app)
    async with app.stream("GET", f"/v1/tts/events/{task_id}") as stream:
        assert stream.status_code == 200
        lines = stream.aiter_lines()
        first = [await anext(lines) for _ in range(3)]
        assert first[1] == "event: status" and '"queued"' in first[2]
        waiting = asyncio.ensure_future(app.get(f"/v1/tts/tasks/{task_id}", params={"wait": 20}))
        await beats.remove("w1")  # the last worker stops
        rest = await asyncio.wait_for(_until_end(lines), HANG_GUARD_S)
    assert rest[0] == "event: error", rest
    assert json.loads(rest[1].removeprefix("data: "))["code"] == "no_worker"
    body = refused(await asyncio.wait_for(waiting, HANG_GUARD_S))
    assert body["code"] == "no_worker"


async def _until_end(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines if line and not line.startswith("id: ")]
