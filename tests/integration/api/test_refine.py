"""``POST /v1/tts/refine`` through the real app, a real Redis and a real worker in-process on the tiny checkpoint (ttsq's
decoder): the refine is a job a worker runs (the API runs no inference), answered within ``REFINE_WAIT_S`` or as a task
to poll; its text is what a submit accepts; it is paid, shared in flight, cached and kept to its caller like a submit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_security import bearer, new_key
from tests.integration.runtime.test_worker import running_worker
from ttsq.domain.jobs import Status
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue

TEXT = "So we went to the park on Sunday. It rained all afternoon, and we laughed about it."
WAIT_S = 120.0
"""How long a test lets a refine wait for the worker (a bound on a condition, not a timing assertion)."""


@asynccontextmanager
async def keyed(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    settings = {"auth": "on", "max_wait_s": WAIT_S, "refine_wait_s": WAIT_S, **overrides}
    async with api_client(make_settings(**settings)) as (client, app):
        yield client, app


async def refine(client: httpx.AsyncClient, key: str, **body: Any) -> httpx.Response:
    return await client.post("/v1/tts/refine", json={"text": TEXT, **body}, headers=bearer(key))


async def test_a_refine_answers_the_refined_text_and_a_submit_takes_it(
    redis: Redis, make_settings: Any, tiny_decoder_engine: DecoderEngine
) -> None:
    async with keyed(make_settings) as (client, _), running_worker(redis, tiny_decoder_engine):
        key = await new_key(redis, "tts")
        answer = await refine(client, key, oral=2, laugh=0, seed=7, **{"break": 4})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"text", "task_id", "seed"} and body["seed"] == 7 and body["text"]
        assert "RateLimit-Remaining" in answer.headers, "paid like a submit"

        job = await JobQueue(redis, queue_config()).get(body["task_id"])
        assert job is not None and job.status is Status.DONE and job.params.refine_only
        assert job.params.sampling.refine_prompt == "[oral_2][laugh_0][break_4]", "the levels reached the worker's job"
        stored = await client.get(f"/v1/tts/result/{body['task_id']}", headers=bearer(key))
        assert stored.headers["content-type"] == "application/json" and stored.json() == {"text": body["text"]}
        for query in ("format=aac", "format=srt", "format=wav&sample_rate=16000", "sample_rate=8000"):
            asked = await client.get(f"/v1/tts/result/{body['task_id']}?{query}", headers=bearer(key))
            assert asked.status_code == 200 and asked.json() == {"text": body["text"]}, f"no audio to convert: {query}"
        refused = await client.get(f"/v1/tts/result/{body['task_id']}?sample_rate=-58800", headers=bearer(key))
        assert refused.status_code == 422 and "sample_rate" in refused.text, "a rate no task could be asked for is refused"

        submitted = await client.post("/v1/tts/submit", json={"text": body["text"]}, headers=bearer(key))
        assert submitted.status_code == 202, f"the refined text is a submit's: {submitted.text}"

        again = await refine(client, key, oral=2, laugh=0, seed=7, **{"break": 4})
        assert again.status_code == 200 and again.json()["text"] == body["text"], "the same seed refines alike (cached)"
        other = await refine(client, key, oral=9, laugh=2, seed=7, **{"break": 0})
        assert other.status_code == 200 and other.json()["task_id"] != body["task_id"]


async def test_a_refine_past_its_wait_is_a_task_to_poll(
    redis: Redis, make_settings: Any, tiny_decoder_engine: DecoderEngine
) -> None:
    """With no worker yet the refine is queued and answered 202 at once (``REFINE_WAIT_S=0``); an identical one joins it;
    once a worker runs, polling the task gives the text."""
    async with keyed(make_settings, refine_wait_s=0) as (client, _):
        key = await new_key(redis, "tts")
        pending = await refine(client, key, oral=1, seed=3)
        assert pending.status_code == 202, pending.text
        task = pending.json()["task_id"]
        assert pending.json()["status"] == "queued" and int(pending.headers["Retry-After"]) >= 1
        joined = await refine(client, key, oral=1, seed=3)
        assert joined.status_code == 202 and joined.json()["task_id"] == task, "single-flight, as a submit"
        assert (await client.get(f"/v1/tts/refine/{task}", headers=bearer(key))).status_code == 202

        async with running_worker(redis, tiny_decoder_engine):
            done = await client.get(f"/v1/tts/refine/{task}", params={"wait": WAIT_S}, headers=bearer(key))
        assert done.status_code == 200, done.text
        assert done.json()["task_id"] == task and done.json()["seed"] == 3 and done.json()["text"]


async def test_a_refine_is_its_callers_and_only_a_refine_has_a_text(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings, refine_wait_s=0) as (client, _):
        alice, bob = await new_key(redis, "tts"), await new_key(redis, "tts")
        task = (await refine(client, alice, seed=1)).json()["task_id"]
        assert (await client.get(f"/v1/tts/refine/{task}", headers=bearer(bob))).status_code == 404, "another key's"
        speech = (await client.post("/v1/tts/submit", json={"text": "Hi.", "seed": 1}, headers=bearer(alice))).json()
        not_refine = await client.get(f"/v1/tts/refine/{speech['task_id']}", headers=bearer(alice))
        assert not_refine.status_code == 404 and "not a refine" in not_refine.json()["detail"]
        assert (await client.post("/v1/tts/refine", json={"text": "Hi."})).status_code == 401


async def test_a_refine_takes_a_style_and_its_own_levels_over_it(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings, refine_wait_s=0) as (client, _):
        key = await new_key(redis, "tts")
        task = (await refine(client, key, style="chat", laugh=0)).json()["task_id"]
        job = await JobQueue(redis, queue_config()).get(task)
        assert job is not None and job.params.sampling.refine_prompt == "[oral_9][laugh_0][break_2]"


async def test_every_refine_field_is_refused_clearly(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings, refine_wait_s=0) as (client, _):
        key = await new_key(redis, "tts")
        cases: list[tuple[dict[str, Any], str]] = [
            ({"oral": 10}, "oral"),
            ({"laugh": -1}, "laugh"),
            ({"break": 8}, "break"),
            ({"break": "3"}, "break"),
            ({"oral": 2.0}, "oral"),
            ({"seed": -1}, "seed"),
            ({"style": "nope"}, "style"),
            ({"text": ""}, "text"),
            ({"text": "Say [Stts] this."}, "text"),
            ({"speed": 5}, "speed"),
            ({"refine_text": True}, "refine_text"),
        ]
        for fields, field in cases:
            answer = await refine(client, key, **fields)
            assert answer.status_code == 422, (fields, answer.text)
            assert answer.json()["detail"][0]["loc"][-1] == field, (fields, answer.json())
        raw = b'{"text": "Hi.", "oral": NaN}'
        nan = await client.post("/v1/tts/refine", content=raw, headers={**bearer(key), "Content-Type": "application/json"})
        assert nan.status_code == 422
        assert await JobQueue(redis, queue_config()).depth() == 0, "nothing refused was queued"


async def test_a_refine_is_rate_limited_like_a_submit(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings, refine_wait_s=0, rate_limit_per_s=0.01, rate_limit_burst=2) as (client, _):
        key = await new_key(redis, "tts")
        assert (await refine(client, key, seed=1)).status_code == 202
        assert (await client.post("/v1/tts/submit", json={"text": "Hi.", "seed": 2}, headers=bearer(key))).status_code == 202
        limited = await refine(client, key, seed=3)
        assert limited.status_code == 429 and "Retry-After" in limited.headers, limited.text


async def test_with_no_worker_alive_a_refine_queues_nothing(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings, no_worker_s=2) as (client, _):
        key = await new_key(redis, "tts")
        answer = await refine(client, key, seed=1)
        assert answer.status_code == 503 and answer.json()["code"] == "no_worker", answer.text
        assert await JobQueue(redis, queue_config()).depth() == 0
