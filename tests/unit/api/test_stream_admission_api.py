"""``STREAM_ADMISSION=refuse``: POST /v1/tts/submit through the real app and a real Redis, against the stream room the
live workers' heartbeats report (written here as a worker writes them)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from ttsq.runtime.health import HeartbeatRecord
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue


async def beat(redis: Redis, worker_id: str, stream_room: int | None) -> None:
    queue = JobQueue(redis, queue_config())
    heartbeats = Heartbeats(redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock)
    await heartbeats.write(worker_id, HeartbeatRecord(worker_id=worker_id, stream_room=stream_room).as_dict())


async def test_a_submit_while_no_worker_has_room_for_a_stream_is_refused_with_retry_after(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(stream_admission="refuse")) as (client, _app):
        body = {"text": "Can you hear me now?", "seed": 1}
        assert (await client.post("/v1/tts/submit", json=body)).status_code == 202  # no worker reports a room: no refusal
        await beat(redis, "w1", 0)
        await beat(redis, "w2", 0)
        refused = await client.post("/v1/tts/submit", json=body)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        assert "real-time" in refused.json()["detail"]
        await beat(redis, "w2", 1)  # one worker can take another stream
        assert (await client.post("/v1/tts/submit", json=body)).status_code == 202


async def test_without_refuse_a_full_pool_still_queues(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(stream_admission="wait")) as (client, _app):
        await beat(redis, "w1", 0)
        assert (await client.post("/v1/tts/submit", json={"text": "Queue me.", "seed": 2})).status_code == 202
