"""Blends through the API: written in a request (native and OpenAI routes) or stored (``POST /v1/voices`` with
components), resolved to a recipe of seeds and embeddings, part of the cache key, refused with a 422 naming the problem."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import queue_config
from tests.integration.runtime.test_worker import running_worker
from tests.unit.api.test_voices import embedding
from ttsq.domain.jobs import TTSParams
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue
from ttsq.store.voices import VoiceRegistry

EMBEDDING = embedding(np.linspace(-1, 1, 64))


async def submitted(client: httpx.AsyncClient, redis: Redis, voice: str) -> TTSParams:
    answer = await client.post("/v1/tts/submit", json={"text": "hi", "voice": voice, "seed": 5})
    assert answer.status_code == 202, answer.text
    job = await JobQueue(redis, queue_config()).get(answer.json()["task_id"])
    assert job is not None
    return job.params


async def test_a_blend_in_a_request_carries_its_recipe_and_the_same_blend_has_the_same_cache_key(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    assert (await client.post("/v1/voices", json={"name": "emb", "embedding": EMBEDDING})).status_code == 201
    params = await submitted(client, redis, "zh_female*0.7+emb*0.3")
    assert params.speaker_blend is not None and params.speaker_seed is None and params.speaker_embedding is None
    recipe = {part.voice: (part.seed, part.embedding, round(part.weight, 9)) for part in params.speaker_blend}
    assert recipe == {"zh_female": (2, None, 0.7), "emb": (None, EMBEDDING, 0.3)}
    same = await submitted(client, redis, "emb*3 + zh_female*7")
    other = await submitted(client, redis, "zh_female*0.6+emb*0.4")
    assert params.cache_key is not None and same.cache_key == params.cache_key, "order and scale of the weights do not matter"
    assert other.cache_key != params.cache_key, "other weights, another key"
    assert (await submitted(client, redis, "zh_female")).cache_key != params.cache_key


async def test_a_stored_blend_is_its_recipe_and_keeps_it_when_a_component_is_deleted(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    assert (await client.post("/v1/voices", json={"name": "narrator", "seed": 1234})).status_code == 201
    components = [{"voice": "zh_male", "weight": 2}, {"voice": "narrator", "weight": 1}]
    created = await client.post("/v1/voices", json={"name": "duet", "components": components})
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["kind"] == "blend"
    assert {(c["voice"], c["seed"], round(c["weight"], 6)) for c in voice["components"]} == {
        ("zh_male", 1111, 0.666667),
        ("narrator", 1234, 0.333333),
    }
    stored = await submitted(client, redis, "duet")
    inline = await submitted(client, redis, "narrator*1+zh_male*2")
    assert stored.speaker_blend == inline.speaker_blend and stored.cache_key == inline.cache_key
    assert (await client.delete("/v1/voices/narrator")).status_code == 204
    assert (await submitted(client, redis, "duet")).speaker_blend == stored.speaker_blend, "the recipe was resolved when stored"
    assert (await client.post("/v1/voices", json={"name": "duet", "seed": 1})).status_code == 409


@pytest.mark.parametrize(
    ("voice", "problem"),
    [
        ("zh_female*0.7+nobody*0.3", "unknown voice 'nobody' in the blend"),
        ("zh_female*-1+zh_male*1", "positive finite"),
        ("zh_female*nan+zh_male*1", "positive finite"),
        ("zh_female*1", "2 to 8 voices"),
        ("zh_female*1+zh_female*2", "more than once"),
        ("zh_female*1+cloned*1", "from a recording"),
        ("zh_female*1+duo*1", "a blend itself"),
        ("zh_female*x+zh_male", "not a number"),
    ],
)
async def test_a_bad_blend_in_a_request_is_a_422_naming_the_problem(
    client: httpx.AsyncClient, redis: Redis, voice: str, problem: str
) -> None:
    registry = VoiceRegistry(redis, JobQueue(redis, queue_config()).keys)
    await registry.create_reference("cloned", None, prompt="not-used", transcript="t")
    assert (
        await client.post(
            "/v1/voices",
            json={"name": "duo", "components": [{"voice": "zh_female", "weight": 1}, {"voice": "zh_male", "weight": 1}]},
        )
    ).status_code == 201
    answer = await client.post("/v1/tts/submit", json={"text": "hi", "voice": voice})
    assert answer.status_code == 422, answer.text
    error = answer.json()["detail"][0]
    assert error["loc"][-1] == "voice" and problem in error["msg"], error


@pytest.mark.parametrize(
    ("components", "problem"),
    [
        ([{"voice": "zh_female", "weight": 1}], "at least 2"),
        ([{"voice": "zh_female", "weight": 1}, {"voice": "zh_male", "weight": 0}], "greater than 0"),
        ([{"voice": "zh_female", "weight": 1}, {"voice": "ghost", "weight": 1}], "unknown voice 'ghost'"),
        ([{"voice": f"v{n}", "weight": 1} for n in range(9)], "at most 8"),
    ],
)
async def test_a_bad_stored_blend_is_a_422_and_nothing_is_stored(
    client: httpx.AsyncClient, components: list[dict[str, Any]], problem: str
) -> None:
    answer = await client.post("/v1/voices", json={"name": "bad", "components": components})
    assert answer.status_code == 422, answer.text
    assert problem in answer.text
    assert (await client.get("/v1/voices/bad")).status_code == 404


async def test_the_openai_route_speaks_a_blend_of_its_own_names_and_ttsq_voices(
    client: httpx.AsyncClient, redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    async with running_worker(redis, tiny_decoder_engine):
        spoken = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "alloy*0.5+zh_male*0.5"})
        assert spoken.status_code == 200, spoken.text
    job = await JobQueue(redis, queue_config()).get(spoken.headers["x-ttsq-task-id"])
    assert job is not None and job.params.speaker_blend is not None
    assert {(part.voice, part.seed) for part in job.params.speaker_blend} == {("zh_female", 2), ("zh_male", 1111)}
    refused = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "alloy*0.5+nobody*0.5"})
    assert refused.status_code == 400 and "nobody" in refused.text


async def test_weights_whose_sum_overflows_a_float_blend_as_their_ratio_on_every_route(
    client: httpx.AsyncClient, redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    """Found by a tester: ``a*1e308+b*1e308`` (each weight finite) overflowed ``math.fsum`` and was a 500 on the
    submit route, the OpenAI route and a stored blend. Equal huge weights are an even blend."""
    params = await submitted(client, redis, "zh_female*1e308+zh_male*1e308")
    assert params.speaker_blend is not None
    assert [part.weight for part in params.speaker_blend] == [0.5, 0.5]
    stored = await client.post(
        "/v1/voices",
        json={"name": "huge", "components": [{"voice": "zh_female", "weight": 1.7e308}, {"voice": "zh_male", "weight": 1.7e308}]},
    )
    assert stored.status_code == 201, stored.text
    async with running_worker(redis, tiny_decoder_engine):
        speech = await client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "zh_female*1e308+zh_male*1e308"}
        )
    assert speech.status_code == 200, speech.text


async def test_the_openai_voice_listing_names_blends_and_recordings_with_their_kind(client: httpx.AsyncClient) -> None:
    """Found by a tester: ``OpenAIVoice.type`` allowed builtin/seed/embedding only, so once one blend (or reference)
    voice existed ``GET /v1/audio/voices`` was a 500 for every caller."""
    stored = await client.post(
        "/v1/voices", json={"name": "mix", "components": [{"voice": "zh_female", "weight": 1}, {"voice": "zh_male", "weight": 2}]}
    )
    assert stored.status_code == 201, stored.text
    listing = await client.get("/v1/audio/voices")
    assert listing.status_code == 200, listing.text
    assert {voice["id"]: voice["type"] for voice in listing.json()["data"]}["mix"] == "blend"
