"""Status, result download, health and readiness, and behaviour while Redis is down."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import httpx
from redis.asyncio import Redis

from tests.conftest import api_client, claimed, queue_config
from tests.support.redis_server import free_port
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue

_seeds = itertools.count(1)


async def queued_task(client: httpx.AsyncClient, **extra: Any) -> str:
    """A new queued task (a fresh seed each time, so single-flight never merges two of them)."""
    response = await client.post("/v1/tts/submit", json={"text": "hello", "seed": next(_seeds), **extra})
    assert response.status_code == 202
    return str(response.json()["task_id"])


async def test_status_of_a_queued_task(client: httpx.AsyncClient) -> None:
    await queued_task(client)
    task_id = await queued_task(client)
    body = (await client.get(f"/v1/tts/tasks/{task_id}")).json()
    assert body["status"] == "queued" and body["queue_position"] == 1
    assert body["attempts"] == 0 and body["max_attempts"] == 3 and body["created_at"] > 0


async def test_unknown_and_malformed_ids_are_404(client: httpx.AsyncClient) -> None:
    for task_id in (str(uuid.uuid4()), "not-a-task", "../../etc/passwd"):
        for path in ("tasks", "result"):
            response = await client.get(f"/v1/tts/{path}/{task_id}")
            assert response.status_code == 404, (path, task_id)
            if "/" not in task_id:
                assert "no task" in response.json()["detail"]


async def test_result_is_202_with_retry_after_while_waiting(client: httpx.AsyncClient, redis: Redis) -> None:
    task_id = await queued_task(client)
    waiting = await client.get(f"/v1/tts/result/{task_id}")
    assert waiting.status_code == 202 and int(waiting.headers["retry-after"]) >= 1
    assert waiting.json()["status"] == "queued"
    await JobQueue(redis, queue_config()).leases.claim("w", block_s=0.1)
    running = await client.get(f"/v1/tts/result/{task_id}")
    assert running.status_code == 202 and running.json()["status"] == "running"


async def test_done_result_downloads_bytes_with_type_and_length(client: httpx.AsyncClient, redis: Redis) -> None:
    task_id = await queued_task(client, format="mp3")
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)
    await queue.leases.complete(held.job, b"ID3fake-mp3-bytes", "audio/mpeg", 2.5, 0.3, cache_key=None)
    response = await client.get(f"/v1/tts/result/{task_id}")
    assert response.status_code == 200
    assert response.content == b"ID3fake-mp3-bytes"
    assert response.headers["content-type"] == "audio/mpeg"
    assert response.headers["content-length"] == str(len(b"ID3fake-mp3-bytes"))
    status = (await client.get(f"/v1/tts/tasks/{task_id}")).json()
    assert status["status"] == "done" and status["audio_duration_s"] == 2.5


async def test_failed_task_is_409_with_its_reason(client: httpx.AsyncClient, redis: Redis) -> None:
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)
    await queue.leases.fail(held.job, "inference failed: boom", retryable=False, cache_key=None)
    response = await client.get(f"/v1/tts/result/{task_id}")
    assert response.status_code == 409
    assert response.json()["status"] == "failed" and response.json()["error"] == "inference failed: boom"


async def test_a_task_whose_record_does_not_load_answers_its_status_and_its_failure(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    """A record another release wrote (a seed of another type) is answered, queued then failed with why, never a 500."""
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    record = json.loads(await redis.get(queue.keys.job(task_id)) or b"{}")
    record["params"]["seed"] = {"draw": 7}
    await redis.set(queue.keys.job(task_id), json.dumps(record))
    queued = await client.get(f"/v1/tts/tasks/{task_id}")
    assert queued.status_code == 200 and queued.json()["status"] == "queued"
    held = await claimed(queue)
    assert held.job.unreadable is not None
    await queue.leases.fail(held.job, held.job.unreadable, retryable=False, cache_key=None)
    status = await client.get(f"/v1/tts/tasks/{task_id}")
    assert status.status_code == 200 and status.json()["status"] == "failed"
    assert status.json()["error"].startswith("the job record could not be read: params.seed: ")
    result = await client.get(f"/v1/tts/result/{task_id}")
    assert result.status_code == 409 and result.json()["error"] == status.json()["error"]


async def test_expired_result_is_404(client: httpx.AsyncClient, redis: Redis) -> None:
    task_id = await queued_task(client)
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)
    await queue.leases.complete(held.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)
    await redis.delete(queue.keys.result(task_id), queue.keys.job(task_id))
    assert (await client.get(f"/v1/tts/result/{task_id}")).status_code == 404


async def test_readyz_does_not_depend_on_workers(client: httpx.AsyncClient, redis: Redis) -> None:
    body = (await client.get("/readyz")).json()
    assert body["status"] == "ready" and body["redis"] == "ok" and body["workers"] == 0
    assert "noise" in body["notice"]
    queue = JobQueue(redis, queue_config())
    await Heartbeats(redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock).write("w1", {"worker_id": "w1"})
    assert (await client.get("/readyz")).json()["workers"] == 1
    assert (await client.get("/healthz")).json() == {
        "status": "ok",
        "redis": None,
        "replicas": None,
        "workers": None,
        "queue_depth": None,
        "model": None,
        "notice": None,
    }


async def test_redis_outage_is_503_with_retry_after(make_settings: Any) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with api_client(make_settings(redis_url=dead, retry_after_s=9)) as (client, _):
        responses = [
            await client.post("/v1/tts/submit", json={"text": "hello", "seed": 1}),
            await client.get(f"/v1/tts/tasks/{uuid.uuid4()}"),
            await client.get(f"/v1/tts/result/{uuid.uuid4()}"),
            await client.get("/readyz"),
        ]
        for response in responses:
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "9"
            assert "unreachable" in response.json()["detail"]
        assert (await client.get("/healthz")).status_code == 200
