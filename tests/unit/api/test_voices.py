"""The voice registry through the API: list, create, fetch, delete; submit with a stored voice."""

from __future__ import annotations

import lzma
from typing import Any

import httpx
import numpy as np
import pybase16384 as b14
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from ttsq.store.queue import JobQueue


def embedding(values: np.ndarray) -> str:
    raw = values.astype(np.float16).tobytes()
    compressed = lzma.compress(raw, format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}])
    return str(b14.encode_to_string(compressed))


async def test_builtin_voices_are_listed(client: httpx.AsyncClient) -> None:
    voices = (await client.get("/v1/voices")).json()["voices"]
    assert {"zh_female", "zh_male"} <= {v["name"] for v in voices}
    assert all(v["builtin"] for v in voices if v["name"] in ("zh_female", "zh_male"))


async def test_create_fetch_use_and_delete_a_seed_voice(client: httpx.AsyncClient, redis: Redis) -> None:
    created = await client.post("/v1/voices", json={"name": "narrator", "seed": 1234})
    assert created.status_code == 201 and created.json()["kind"] == "seed"
    assert (await client.get("/v1/voices/narrator")).json()["seed"] == 1234
    assert "narrator" in {v["name"] for v in (await client.get("/v1/voices")).json()["voices"]}
    task = (await client.post("/v1/tts/submit", json={"text": "hi", "voice": "narrator"})).json()
    job = await JobQueue(redis, queue_config()).get(task["task_id"])
    assert job is not None and job.params.speaker_seed == 1234 and job.params.voice == "narrator"
    assert (await client.post("/v1/voices", json={"name": "narrator", "seed": 1})).status_code == 409
    assert (await client.delete("/v1/voices/narrator")).status_code == 204
    assert (await client.get("/v1/voices/narrator")).status_code == 404
    assert (await client.delete("/v1/voices/narrator")).status_code == 404
    unknown = await client.post("/v1/tts/submit", json={"text": "hi", "voice": "narrator"})
    assert unknown.status_code == 422 and "narrator" in unknown.text


async def test_voices_survive_an_api_restart(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (first, _):
        assert (await first.post("/v1/voices", json={"name": "kept", "seed": 9})).status_code == 201
    async with api_client(make_settings()) as (second, _):
        assert (await second.get("/v1/voices/kept")).json()["seed"] == 9


async def test_embedding_voice_is_validated_and_used(client: httpx.AsyncClient, redis: Redis) -> None:
    good = embedding(np.linspace(-1, 1, 64))
    created = await client.post("/v1/voices", json={"name": "emb", "embedding": good})
    assert created.status_code == 201, created.text
    listed = {v["name"]: v for v in (await client.get("/v1/voices")).json()["voices"]}
    assert listed["emb"]["embedding"] is None, "lists leave the long embedding out"
    assert (await client.get("/v1/voices/emb")).json()["embedding"] == good
    task = (await client.post("/v1/tts/submit", json={"text": "hi", "voice": "emb"})).json()
    job = await JobQueue(redis, queue_config()).get(task["task_id"])
    assert job is not None and job.params.speaker_embedding == good and job.params.speaker_seed is None


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"name": "bad name!", "seed": 1}, "name", "letters"),
        ({"name": "x" * 65, "seed": 1}, "name", "letters"),
        ({"name": "both", "seed": 1, "embedding": "abc"}, "seed", "exactly one"),
        ({"name": "neither"}, "seed", "exactly one"),
        ({"name": "garbage", "embedding": "definitely not an embedding"}, "embedding", "not a ChatTTS"),
        ({"name": "wrongdim", "embedding": embedding(np.ones(10))}, "embedding", "64"),
        ({"name": "nan", "embedding": embedding(np.array([np.nan] * 64))}, "embedding", "non-finite"),
        ({"name": "neg", "seed": -1}, "seed", ""),
    ],
)
async def test_invalid_voices_are_a_clear_422(client: httpx.AsyncClient, body: dict[str, Any], field: str, words: str) -> None:
    response = await client.post("/v1/voices", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"][-1] == field and words in e["msg"] for e in errors), errors


async def test_builtin_voices_cannot_be_replaced_or_deleted(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/voices", json={"name": "zh_female", "seed": 1})).status_code == 409
    assert (await client.post("/v1/voices", json={"name": "alloy", "seed": 1})).status_code == 409
    deleted = await client.delete("/v1/voices/zh_male")
    assert deleted.status_code == 409 and "built-in" in deleted.json()["detail"]
