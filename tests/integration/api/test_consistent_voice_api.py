"""``consistent_voice`` through the API: a per-request flag on the native and OpenAI routes, ``CONSISTENT_VOICE`` as
its default, carried to the worker, and part of the cache key."""

from __future__ import annotations

from typing import Any

import httpx
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.runtime.test_worker import running_worker
from ttsq.domain.jobs import Status, TTSParams
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue
from ttsq.store.voices import VoiceRegistry

LONG = "The first sentence sets the voice. The second one follows it."


async def params_of(client: httpx.AsyncClient, redis: Redis, **fields: Any) -> TTSParams:
    answer = await client.post("/v1/tts/submit", json={"text": LONG, "voice": "zh_female", **fields})
    assert answer.status_code == 202, answer.text
    job = await JobQueue(redis, queue_config()).get(answer.json()["task_id"])
    assert job is not None
    return job.params


async def test_the_flag_reaches_the_job_and_changes_the_cache_key(client: httpx.AsyncClient, redis: Redis) -> None:
    on = await params_of(client, redis, consistent_voice=True)
    off = await params_of(client, redis, consistent_voice=False)
    unsaid = await params_of(client, redis)
    assert on.consistent_voice and not off.consistent_voice and not unsaid.consistent_voice
    assert on.cache_key is not None and on.cache_key != off.cache_key
    assert off.cache_key == unsaid.cache_key, "off by default (CONSISTENT_VOICE=false)"
    assert (await params_of(client, redis, consistent_voice=True)).cache_key == on.cache_key


async def test_the_setting_is_the_default_and_a_request_overrides_it(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(consistent_voice=True)) as (client, _):
        assert (await params_of(client, redis)).consistent_voice
        assert not (await params_of(client, redis, consistent_voice=False)).consistent_voice


async def test_a_reference_voice_is_anchored_already_so_the_flag_is_dropped(client: httpx.AsyncClient, redis: Redis) -> None:
    await VoiceRegistry(redis, JobQueue(redis, queue_config()).keys).create_reference("cloned", None, prompt="p", transcript="t")
    params = await params_of(client, redis, voice="cloned", consistent_voice=True)
    assert not params.consistent_voice and params.speaker_prompt == "p"


async def test_the_openai_route_takes_the_flag_and_a_worker_speaks_it(
    client: httpx.AsyncClient, redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    async with running_worker(redis, tiny_decoder_engine):
        spoken = await client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": LONG, "voice": "alloy", "consistent_voice": True}
        )
        assert spoken.status_code == 200, spoken.text
    job = await JobQueue(redis, queue_config()).get(spoken.headers["x-ttsq-task-id"])
    assert job is not None and job.params.consistent_voice and job.status is Status.DONE
    assert job.captions is not None and len(job.captions) == 2, "two chunks, the second conditioned on the first"
