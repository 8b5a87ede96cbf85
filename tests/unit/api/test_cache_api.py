"""Cache hits, single-flight and the task-id guard through the real app on a real Redis."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, claimed, queue_config
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import TaskService, TTSService
from ttsq.domain.voices import builtin
from ttsq.store.cache import CachedAudio
from ttsq.store.queue import JobQueue

REQUEST = {"text": "Cached sentence.", "voice": "zh_female", "format": "mp3"}


def service_of(app: FastAPI) -> TaskService:
    return cast(TTSService, app.state.service).tasks


async def warm_cache(app: FastAPI, body: dict[str, Any], audio: bytes) -> None:
    service = service_of(app)
    voice = builtin(body["voice"]) if "voice" in body else None
    params = service.build_params(SubmitRequest(**body), voice)
    assert params.cache_key is not None
    await service.cache.put(params.cache_key, CachedAudio(audio, "audio/mpeg", 1.25))


async def test_a_cache_hit_is_done_at_once_and_downloads_immediately(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, app):
        await warm_cache(app, REQUEST, b"ID3-cached-audio")
        response = await client.post("/v1/tts/submit", json=REQUEST)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "done" and body["cached"] is True and body["estimate_s"] == 0
        audio = await client.get(f"/v1/tts/result/{body['task_id']}")
        assert audio.status_code == 200 and audio.content == b"ID3-cached-audio"
        assert audio.headers["content-type"] == "audio/mpeg"
        status = (await client.get(f"/v1/tts/tasks/{body['task_id']}")).json()
        assert status["status"] == "done" and status["audio_duration_s"] == 1.25
        assert await redis.llen(JobQueue(redis, queue_config()).keys.queue) == 0, "nothing was queued"


async def test_width_and_spacing_variants_hit_the_same_entry(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, app):
        await warm_cache(app, REQUEST, b"audio")
        variant = REQUEST | {"text": "\u200bＣａｃｈｅｄ   sentence．\n"}
        assert (await client.post("/v1/tts/submit", json=variant)).json()["cached"] is True


async def test_random_requests_are_never_served_from_the_cache(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, app):
        await warm_cache(app, {"text": "Random.", "seed": 1}, b"audio")
        response = await client.post("/v1/tts/submit", json={"text": "Random."})
        assert response.status_code == 202 and response.json()["cached"] is False


async def test_a_disabled_cache_always_queues(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(cache_enabled=False)) as (client, app):
        await warm_cache(app, REQUEST, b"audio")
        assert (await client.post("/v1/tts/submit", json=REQUEST)).status_code == 202


async def test_identical_concurrent_submits_share_one_job(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        responses = await asyncio.gather(*(client.post("/v1/tts/submit", json=REQUEST) for _ in range(25)))
        assert {r.status_code for r in responses} == {202}
        bodies = [r.json() for r in responses]
        assert len({b["task_id"] for b in bodies}) == 1
        assert sum(not b["joined"] for b in bodies) == 1
        assert await redis.llen(JobQueue(redis, queue_config()).keys.queue) == 1
        other = await client.post("/v1/tts/submit", json=REQUEST | {"seed": 99})
        assert other.json()["task_id"] != bodies[0]["task_id"], "a different request is not merged"


async def test_a_finished_job_releases_its_single_flight_marker(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(cache_enabled=False)) as (client, _):
        first = (await client.post("/v1/tts/submit", json=REQUEST)).json()["task_id"]
        queue = JobQueue(redis, queue_config())
        claim = await queue.leases.claim("w", block_s=0.1)
        assert claim is not None
        await queue.leases.complete(claim.job, b"audio", "audio/mpeg", 1.0, 0.1, cache_key=claim.job.params.cache_key)
        second = (await client.post("/v1/tts/submit", json=REQUEST)).json()
        assert second["task_id"] != first and second["joined"] is False


async def test_a_stale_single_flight_marker_is_replaced(redis: Redis, make_settings: Any) -> None:
    """A marker left behind by a job that finished without clearing it must not swallow new jobs."""
    async with api_client(make_settings(cache_enabled=False)) as (client, _):
        first = (await client.post("/v1/tts/submit", json=REQUEST)).json()["task_id"]
        queue = JobQueue(redis, queue_config())
        held = await claimed(queue)
        await queue.leases.complete(held.job, b"audio", "audio/mpeg", 1.0, 0.1, cache_key=None)
        second = (await client.post("/v1/tts/submit", json=REQUEST)).json()
        assert second["task_id"] != first and second["joined"] is False
        assert await redis.llen(queue.keys.queue) == 1


async def command_count(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def test_forged_task_ids_cost_redis_nothing(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        real = (await client.post("/v1/tts/submit", json={"text": "x", "seed": 1})).json()["task_id"]
        random_part, _, tag = real.partition(".")
        forged = [
            str(uuid.uuid4()),
            f"{uuid.uuid4()}.{tag}",
            f"{random_part}.{'A' * 16}",
            f"{random_part}.{tag[:-1]}B" if tag[-1] != "B" else f"{random_part}.{tag[:-1]}C",
            "not-an-id",
        ] * 40
        await redis.config_resetstat()
        before = await command_count(redis)
        for task_id in forged:
            for path in ("tasks", "result"):
                assert (await client.get(f"/v1/tts/{path}/{task_id}")).status_code == 404
        assert await command_count(redis) == before, "a forged id reached Redis"
        assert (await client.get(f"/v1/tts/tasks/{real}")).status_code == 200
        assert await command_count(redis) > before


async def test_replicas_accept_each_others_ids(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (replica_a, _), api_client(make_settings()) as (replica_b, _):
        task_id = (await replica_a.post("/v1/tts/submit", json={"text": "x", "seed": 2})).json()["task_id"]
        assert (await replica_b.get(f"/v1/tts/tasks/{task_id}")).status_code == 200


async def test_a_configured_secret_signs_ids_without_redis(redis: Redis, make_settings: Any) -> None:
    async with (
        api_client(make_settings(task_id_secret="s" * 32)) as (client_a, _),
        api_client(make_settings(task_id_secret="t" * 32)) as (client_b, _),
    ):
        task_id = (await client_a.post("/v1/tts/submit", json={"text": "x", "seed": 3})).json()["task_id"]
        assert (await client_a.get(f"/v1/tts/tasks/{task_id}")).status_code == 200
        assert (await client_b.get(f"/v1/tts/tasks/{task_id}")).status_code == 404, "another secret, another id space"


async def test_cache_counters_per_level(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, app):
        await client.post("/v1/tts/submit", json=REQUEST)
        await warm_cache(app, REQUEST | {"seed": 1}, b"audio")
        await client.post("/v1/tts/submit", json=REQUEST | {"seed": 1})
        stats = service_of(app).cache.stats.as_dict()
        assert stats["l1"] == {"hits": 1, "misses": 1}
        assert stats["l2"]["misses"] == 1 and stats["l3"]["misses"] == 1


async def test_single_flight_can_be_turned_off(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(single_flight=False, cache_enabled=False)) as (client, _):
        bodies = [(await client.post("/v1/tts/submit", json=REQUEST)).json() for _ in range(3)]
        assert len({b["task_id"] for b in bodies}) == 3 and not any(b["joined"] for b in bodies)
