"""The pronunciation dictionary through HTTP: admin routes, and entries reaching the job's text and its cache key on
the native and the OpenAI routes (real redis-server, the real app)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile
from redis.asyncio import Redis

from tests.conftest import FakeClock, api_client, claimed, queue_config, settings
from tests.integration.api.test_security import bearer, keyed_api, new_key
from ttsq.domain.jobs import Job
from ttsq.store.keys import Keys
from ttsq.store.pronunciation import PronunciationStore
from ttsq.store.queue import JobQueue

ROUTE = "/v1/admin/pronunciation"


async def job_of(redis: Redis, answer: httpx.Response) -> Job:
    assert answer.status_code == 202, answer.text
    job = await JobQueue(redis, queue_config()).get(answer.json()["task_id"])
    assert job is not None
    return job


async def submitted(client: httpx.AsyncClient, redis: Redis, text: str, **headers: str) -> Job:
    return await job_of(redis, await client.post("/v1/tts/submit", json={"text": text, "voice": "zh_female"}, headers=headers))


async def add(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    created = await client.post(ROUTE, json=body)
    assert created.status_code == 201, created.text
    return dict(created.json())


async def test_an_english_entry_reaches_the_job_text_and_changes_only_the_keys_of_texts_it_touches(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    touched_before = await submitted(client, redis, "I like SQL.")
    untouched_before = await submitted(client, redis, "I like tea.")
    entry = await add(client, match="SQL", replacement="sequel", language="en")
    touched = await submitted(client, redis, "I like sql.")
    untouched = await submitted(client, redis, "I like tea.")
    assert touched.params.text == "I like sequel."
    assert touched.params.cache_key != touched_before.params.cache_key
    assert untouched.params.cache_key == untouched_before.params.cache_key
    listed = (await client.get(ROUTE)).json()["entries"]
    assert [e["id"] for e in listed] == [entry["id"]]
    assert (await client.delete(f"{ROUTE}/{entry['id']}")).status_code == 204
    assert (await submitted(client, redis, "I like SQL.")).params.cache_key == touched_before.params.cache_key
    assert (await client.delete(f"{ROUTE}/{entry['id']}")).status_code == 404


async def test_a_chinese_entry_rewrites_inside_words_before_normalisation(client: httpx.AsyncClient, redis: Redis) -> None:
    await add(client, match="重庆", replacement="崇庆", language="zh")
    await add(client, match=r"(\d+)公斤", replacement=r"\1千克", kind="regex", language="zh")
    job = await submitted(client, redis, "我在重庆市买了3公斤!")
    assert job.params.text == "我在崇庆市买了3千克。", "rewritten, then normalised (! became 。)"
    assert (await submitted(client, redis, "Chongqing is 重庆")).params.text == "Chongqing is崇庆"


async def test_a_keys_entry_applies_to_that_key_only(make_settings: Any, redis: Redis) -> None:
    async with keyed_api(make_settings) as (client, _):
        admin, one, other = await new_key(redis, "admin"), await new_key(redis, "tts"), await new_key(redis, "tts")
        one_id = one.split("_")[1]
        created = await client.post(
            ROUTE, json={"match": "GPU", "replacement": "G P U", "scope": f"key:{one_id}"}, headers=bearer(admin)
        )
        assert created.status_code == 201, created.text
        assert (await submitted(client, redis, "my GPU", **bearer(one))).params.text == "my G P U"
        assert (await submitted(client, redis, "my GPU", **bearer(other))).params.text == "my GPU"
        refused = await client.post(ROUTE, json={"match": "a", "replacement": "b"}, headers=bearer(one))
        assert refused.status_code == 403, "the dictionary is written with the admin scope"
        assert (await client.get(ROUTE, headers=bearer(one))).status_code == 403


async def test_the_openai_route_applies_the_dictionary(client: httpx.AsyncClient, redis: Redis) -> None:
    await add(client, match="SQL", replacement="sequel")
    queue = JobQueue(redis, queue_config())
    flac = io.BytesIO()
    soundfile.write(flac, np.zeros(2400, dtype=np.int16), 24_000, format="FLAC")

    async def run_the_job() -> Job:
        """What a worker does to the queued job, through the queue's own scripts."""
        held = await claimed(queue)
        await queue.leases.complete(held.job, flac.getvalue(), "audio/flac", 0.1, 0.1, cache_key=None)
        return held.job

    speech = client.post(
        "/v1/audio/speech", json={"model": "tts-1", "input": "SQL rocks.", "voice": "alloy", "response_format": "flac"}
    )
    answer, job = await asyncio.gather(speech, run_the_job())
    assert answer.status_code == 200 and answer.content.startswith(b"fLaC")
    assert job.params.text == "sequel rocks."


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"kind": "regex", "match": "(oops", "replacement": "x"}, "match", "not a valid regular expression"),
        ({"kind": "regex", "match": "x?", "replacement": "y"}, "match", "empty string"),
        ({"kind": "regex", "match": r"\b", "replacement": "y"}, "match", "zero characters"),
        ({"kind": "regex", "match": "(?=x)", "replacement": "y"}, "match", "zero characters"),
        ({"kind": "regex", "match": "(?:a{1000}){1000}", "replacement": "y"}, "match", "multiply to 1000000"),
        ({"kind": "regex", "match": "(x)", "replacement": r"\3"}, "replacement", "group"),
        ({"match": "x" * 201, "replacement": "y"}, "match", "limit is 200"),
        ({"match": "x", "replacement": "[spk_emb]"}, "replacement", "[spk_emb]"),
        ({"match": "x", "replacement": "y", "scope": "key:nope"}, "scope", "tenant:"),
        ({"match": "x", "replacement": "y", "language": "fr"}, "language", ""),
    ],
)
async def test_bad_entries_are_a_422_naming_the_problem(
    client: httpx.AsyncClient, body: dict[str, Any], field: str, words: str
) -> None:
    refused = await client.post(ROUTE, json=body)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"][0]
    assert detail["loc"][-1] == field and words in detail["msg"]
    assert (await client.get(ROUTE)).json()["entries"] == [], "nothing stored"


async def test_a_duplicate_or_an_entry_past_the_scopes_cap_is_a_409(make_settings: Any) -> None:
    async with api_client(make_settings(pronunciation_max_entries=2)) as (client, _):
        await add(client, match="one", replacement="1")
        twin = await client.post(ROUTE, json={"match": "ONE", "replacement": "uno"})
        assert twin.status_code == 409 and "already" in twin.text
        await add(client, match="two", replacement="2")
        full = await client.post(ROUTE, json={"match": "three", "replacement": "3"})
        assert full.status_code == 409 and "limit" in full.text
        await add(client, match="three", replacement="3", scope="tenant:acme")


async def test_a_catastrophic_regex_refuses_the_submit_naming_the_entry(client: httpx.AsyncClient) -> None:
    entry = await add(client, kind="regex", match="(a|aa)+b", replacement="x")
    refused = await client.post("/v1/tts/submit", json={"text": "a" * 80 + "!"})
    assert refused.status_code == 422 and entry["id"] in refused.text


async def test_a_submit_that_runs_regex_entries_pays_its_token_before_they_run_timed_out_or_not(
    make_settings: Any, redis: Redis
) -> None:
    """Submits refused by a regex's time limit each spent its time and paid nothing, so a caller could repeat them
    at will; now each pays one token, as a queued submit does (and no more), and an empty bucket is a 429."""
    async with api_client(make_settings(rate_limit_burst=2, rate_limit_per_s=0.001)) as (client, _):
        await add(client, kind="regex", match="(a|aa)+b", replacement="x")
        answers = [await client.post("/v1/tts/submit", json={"text": "a" * 80 + "!"}) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [422, 422, 429], [answer.text for answer in answers]
    await redis.flushdb()  # a full bucket again, and no entry
    async with api_client(make_settings(rate_limit_burst=2, rate_limit_per_s=0.001)) as (client, _):
        await add(client, kind="regex", match=r"\bSQL\b", replacement="sequel")
        answers = [await client.post("/v1/tts/submit", json={"text": f"SQL {n}."}) for n in range(3)]
    assert [answer.status_code for answer in answers] == [202, 202, 429], "one token each, not two"
    assert answers[1].headers["RateLimit-Remaining"] == "0"


async def test_a_text_the_dictionary_makes_too_long_is_refused_saying_so(make_settings: Any, redis: Redis) -> None:
    # ``redis``: a flushed database, so no bucket an earlier test emptied (the same anonymous caller) refuses first.
    async with api_client(make_settings(max_text_chars=20)) as (client, _):
        await add(client, match="x", replacement="a long expansion")
        refused = await client.post("/v1/tts/submit", json={"text": "x x"})
        assert refused.status_code == 422 and "once the pronunciation dictionary is applied" in refused.text


async def test_a_replica_sees_another_replicas_change_after_its_refresh_interval(redis: Redis, clock: FakeClock) -> None:
    config = settings()

    def replica() -> PronunciationStore:
        return PronunciationStore(redis, Keys("ttsq"), config.pronunciation_limits(), max_entries=10, refresh_s=5.0, clock=clock)

    writer, reader = replica(), replica()
    assert (await reader.dictionary()).apply("SQL", ["global"]) == "SQL"
    await writer.create(kind="word", match="SQL", replacement="sequel")
    assert (await writer.dictionary()).apply("SQL", ["global"]) == "sequel", "the writer's own next submit sees it"
    assert (await reader.dictionary()).apply("SQL", ["global"]) == "SQL", "no Redis read before the interval"
    clock.advance(5.0)
    assert (await reader.dictionary()).apply("SQL", ["global"]) == "sequel"
