"""POST /v1/tts/submit through the real app and a real Redis."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED
from ttsq.store.queue import JobQueue


async def submit(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/tts/submit", json=body)


async def test_submit_answers_202_with_an_unguessable_task_id(client: httpx.AsyncClient, redis: Redis) -> None:
    first = await submit(client, text="Hello there.", seed=7)
    second = await submit(client, text="Second one.", seed=7)
    assert first.status_code == 202, first.text
    body = first.json()
    random_part, _, tag = body["task_id"].partition(".")
    assert uuid.UUID(random_part).version == 4 and len(tag) == 16
    assert body["status"] == "queued" and body["queue_position"] == 0 and body["estimate_s"] > 0
    assert second.json()["queue_position"] == 1
    assert "noise" in body["notice"]
    job = await JobQueue(redis, queue_config()).get(body["task_id"])
    assert job is not None and job.params.text == "Hello there."


async def test_voice_without_seed_is_deterministic_with_the_default_sampling_seed(client: httpx.AsyncClient) -> None:
    body = (await submit(client, text="hi", voice="zh_female")).json()
    assert body["seed"] == DEFAULT_SAMPLING_SEED and body["deterministic"] is True


async def test_seed_without_voice_also_picks_the_speaker(client: httpx.AsyncClient, redis: Redis) -> None:
    body = (await submit(client, text="hi", seed=1234)).json()
    assert body["seed"] == 1234 and body["deterministic"] is True
    job = await JobQueue(redis, queue_config()).get(body["task_id"])
    assert job is not None and job.params.speaker_seed == 1234 and job.params.voice is None


async def test_neither_voice_nor_seed_draws_and_reports_a_fresh_seed(client: httpx.AsyncClient, redis: Redis) -> None:
    seeds = {(await submit(client, text="hi")).json()["seed"] for _ in range(5)}
    assert len(seeds) == 5
    body = (await submit(client, text="hi")).json()
    assert body["deterministic"] is False
    job = await JobQueue(redis, queue_config()).get(body["task_id"])
    assert job is not None and job.params.speaker_seed == body["seed"] == job.params.seed


async def test_text_is_cleaned_of_invisible_characters(client: httpx.AsyncClient, redis: Redis) -> None:
    body = (await submit(client, text="\u200bHello\u200d  world\ufeff", seed=1)).json()
    job = await JobQueue(redis, queue_config()).get(body["task_id"])
    assert job is not None and job.params.text == "Hello world"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"text": ""}, "text", "empty"),
        ({"text": "\u200b\u200c\ufeff \t"}, "text", "empty"),
        ({"text": "¿ ' ... !?"}, "text", "nothing to read aloud"),
        ({"text": "a" * 501}, "text", "limit"),
        ({"text": "hi [Stts] there"}, "text", "[Stts]"),
        ({"text": "hi [speed_9]"}, "text", "[speed_9]"),
        ({"text": "hi", "speed": 0}, "speed", ""),
        ({"text": "hi", "speed": 10}, "speed", ""),
        ({"text": "hi", "temperature": 0}, "temperature", ""),
        ({"text": "hi", "temperature": 1.5}, "temperature", ""),
        ({"text": "hi", "top_p": 0.05}, "top_p", ""),
        ({"text": "hi", "top_k": 0}, "top_k", ""),
        ({"text": "hi", "top_k": 101}, "top_k", ""),
        ({"text": "hi", "seed": -1}, "seed", ""),
        ({"text": "hi", "format": "m4a"}, "format", ""),
        ({"text": "hi", "voice": "nobody"}, "voice", "zh_female"),
        ({"text": "hi", "colour": "blue"}, "colour", ""),
        ({}, "text", ""),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(client: httpx.AsyncClient, body: dict[str, Any], field: str, words: str) -> None:
    response = await client.post("/v1/tts/submit", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"][-1] == field for e in errors), errors
    assert any(words in e["msg"] for e in errors), errors


async def test_allowed_prosody_tokens_pass(client: httpx.AsyncClient) -> None:
    text = "你好[uv_break]今天[laugh]真好[lbreak][break_3][laugh_1][oral_2]"
    assert (await submit(client, text=text, seed=3)).status_code == 202


async def test_text_limit_is_a_setting(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(max_text_chars=10)) as (client, _):
        assert (await submit(client, text="a" * 10, seed=1)).status_code == 202
        assert (await submit(client, text="a" * 11, seed=1)).status_code == 422


async def test_full_queue_is_a_429_with_retry_after(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(max_queue_depth=2, retry_after_s=7)) as (client, _):
        for seed in (1, 2):
            assert (await submit(client, text="hi", seed=seed)).status_code == 202
        full = await submit(client, text="hi", seed=3)
    assert full.status_code == 429
    assert full.headers["retry-after"] == "7"
    assert "full" in full.json()["detail"]


async def test_malformed_json_is_a_clear_4xx(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/tts/submit", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "JSON" in response.text or "json" in response.text


async def test_openapi_documents_every_error(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    submit_responses = spec["paths"]["/v1/tts/submit"]["post"]["responses"]
    assert {"202", "422", "429", "503"} <= set(submit_responses)
    result_responses = spec["paths"]["/v1/tts/result/{task_id}"]["get"]["responses"]
    assert {"200", "202", "404", "409", "503"} <= set(result_responses)
