"""Styles (``/v1/styles``) and the prosody fields through the real app on a real Redis: the catalogue, a tenant's own
styles as a tenant's own voices are, a style resolved at submit into the job's parameters on every route that takes
sampling fields (native submit, the OpenAI route, a realtime session, a dialogue and each of its lines), the request's
own fields over its style's, and prosody in what single-flight joins."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis
from websockets.asyncio.client import connect

from tests.conftest import api_client, queue_config
from tests.integration.api.test_realtime_session import GUARD_S, next_event, served, started
from tests.integration.api.test_security import bearer, new_key
from ttsq.domain.jobs import TTSParams
from ttsq.domain.sampling import SamplingFields
from ttsq.store.queue import JobQueue


@asynccontextmanager
async def keyed(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(**{"auth": "on", **overrides})) as (client, app):
        yield client, app


async def job_params(redis: Redis, task_id: str) -> TTSParams:
    job = await JobQueue(redis, queue_config()).get(task_id)
    assert job is not None
    return job.params


def levels(params: SamplingFields) -> tuple[object, ...]:
    return (params.speed, params.oral, params.laugh, params.break_, params.refine_text)


async def names(client: httpx.AsyncClient, key: str) -> set[str]:
    listed = await client.get("/v1/styles", headers=bearer(key))
    assert listed.status_code == 200, listed.text
    return {style["name"] for style in listed.json()["styles"]}


async def test_the_builtin_catalogue_is_listed_fetched_and_kept(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        tts, admin = await new_key(redis, "tts"), await new_key(redis, "admin")
        assert {"chat", "calm", "newscast", "whispering"} <= await names(client, tts)
        chat = (await client.get("/v1/styles/chat", headers=bearer(tts))).json()
        assert chat == {
            "name": "chat",
            "builtin": True,
            "owner": None,
            "created_at": None,
            "speed": 6,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "refine_text": True,
            "oral": 9,
            "laugh": 1,
            "break": 2,
        }
        assert (await client.delete("/v1/styles/chat", headers=bearer(admin))).status_code == 409
        taken = await client.post("/v1/styles", json={"name": "chat", "speed": 2}, headers=bearer(admin))
        assert taken.status_code == 409 and "built-in" in taken.json()["detail"]


async def test_a_tenants_style_is_its_own_and_absent_to_another_tenant(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        acme_admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other = await new_key(redis, "tts", tenant="other")
        body = {"name": "storyteller", "speed": 3, "oral": 2, "break": 6, "temperature": 0.4}
        created = await client.post("/v1/styles", json=body, headers=bearer(acme_admin))
        assert created.status_code == 201, created.text
        assert created.json()["owner"] == "tenant:acme" and created.json()["refine_text"] is True, "a level turns it on"
        assert (await client.post("/v1/styles", json=body, headers=bearer(acme))).status_code == 403, "scope admin"
        assert (await client.post("/v1/styles", json=body, headers=bearer(acme_admin))).status_code == 409

        assert "storyteller" in await names(client, acme)
        assert "storyteller" not in await names(client, other)
        assert (await client.get("/v1/styles/storyteller", headers=bearer(other))).status_code == 404
        refused = await client.post("/v1/tts/submit", json={"text": "Hi.", "style": "storyteller"}, headers=bearer(other))
        assert refused.status_code == 422
        error = refused.json()["detail"][0]
        assert error["loc"] == ["body", "style"] and "unknown style 'storyteller'" in error["msg"]

        shared = await client.post("/v1/styles", json={"name": "house", "oral": 1, "shared": True}, headers=bearer(acme_admin))
        assert shared.status_code == 201 and shared.json()["owner"] is None
        assert "house" in await names(client, other), "a shared style is every tenant's"

        assert (await client.delete("/v1/styles/storyteller", headers=bearer(acme_admin))).status_code == 204
        assert (await client.get("/v1/styles/storyteller", headers=bearer(acme))).status_code == 404


async def test_a_style_is_resolved_at_submit_under_the_requests_own_fields(redis: Redis, make_settings: Any) -> None:
    """The job carries the parameters, not the style: a style deleted after the submit changes no queued job."""
    async with keyed(make_settings) as (client, _):
        admin, tts = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        style = {"name": "mine", "speed": 3, "oral": 2, "laugh": 0, "break": 6, "top_k": 7}
        assert (await client.post("/v1/styles", json=style, headers=bearer(admin))).status_code == 201

        plain = await client.post("/v1/tts/submit", json={"text": "One.", "seed": 1, "style": "mine"}, headers=bearer(tts))
        assert plain.status_code == 202, plain.text
        overridden = await client.post(
            "/v1/tts/submit", json={"text": "Two.", "seed": 1, "style": "mine", "speed": 8, "oral": 0}, headers=bearer(tts)
        )
        off = await client.post(
            "/v1/tts/submit", json={"text": "Three.", "seed": 1, "style": "mine", "refine_text": False}, headers=bearer(tts)
        )
        assert (await client.delete("/v1/styles/mine", headers=bearer(admin))).status_code == 204

        first = await job_params(redis, plain.json()["task_id"])
        assert levels(first) == (3, 2, 0, 6, True) and first.top_k == 7
        assert levels(await job_params(redis, overridden.json()["task_id"])) == (8, 0, 0, 6, True)
        assert levels(await job_params(redis, off.json()["task_id"])) == (3, None, None, None, False), "levels dropped"
        gone = await client.post("/v1/tts/submit", json={"text": "Four.", "style": "mine"}, headers=bearer(tts))
        assert gone.status_code == 422, "deleted: no new job gets it"


async def speech_job(redis: Redis, client: httpx.AsyncClient, key: str, **fields: Any) -> tuple[httpx.Response, TTSParams]:
    """An OpenAI speech request, and the job it queued: the test plays the worker (claims the job, completes it with a
    little silence), so that the answer, which is the audio, ends."""
    body = {"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "pcm", **fields}
    answer = asyncio.create_task(client.post("/v1/audio/speech", json=body, headers=bearer(key)))
    queue = JobQueue(redis, queue_config())
    async with asyncio.timeout(GUARD_S):
        while (claim := await queue.leases.claim("test-worker", block_s=0.2)) is None:
            pass
        await queue.leases.complete(claim.job, bytes(4), "audio/pcm", 0.0, 0.0, cache_key=claim.job.params.cache_key)
        return await answer, claim.job.params


async def test_the_openai_route_takes_the_levels_and_a_style_as_extra_fields(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        tts = await new_key(redis, "tts")
        answer, params = await speech_job(redis, client, tts, style="chat", laugh=0)
        assert answer.status_code == 200 and "X-TTSQ-Ignored-Fields" not in answer.headers, answer.headers
        assert levels(params) == (6, 9, 0, 2, True), "its style's speed and levels, its own laugh"
        _, params = await speech_job(redis, client, tts, style="chat", speed=1.0)
        assert params.speed == 5, "OpenAI's speed, when sent, over the style's"
        refused = await client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": "Hi.", "voice": "alloy", "oral": 10}, headers=bearer(tts)
        )
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "oral"


async def test_a_realtime_session_takes_a_style_and_the_levels(redis: Redis, make_settings: Any) -> None:
    config = make_settings(realtime_max_s=120)
    async with served(config) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, seed=3, style="calm", laugh=2)
        await ws.send(json.dumps({"type": "text", "text": "One sentence here."}))
        await ws.send(json.dumps({"type": "close"}))
        queued = await next_event(ws, "segment.queued")
    assert levels(await job_params(redis, queued["task_id"])) == (1, 4, 2, 4, True)


async def test_single_flight_joins_only_requests_of_the_same_prosody(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        tts = await new_key(redis, "tts")

        async def submit(**fields: Any) -> dict[str, Any]:
            answer = await client.post("/v1/tts/submit", json={"text": "Same words.", "seed": 4, **fields}, headers=bearer(tts))
            assert answer.status_code == 202, answer.text
            return dict(answer.json())

        first = await submit(oral=2)
        assert (await submit(oral=2))["task_id"] == first["task_id"], "identical: joined"
        assert (await submit(style="chat", oral=2, speed=5, laugh=None))["joined"] is False
        for other in ({"oral": 3}, {"laugh": 0, "oral": 2}, {"break": 0, "oral": 2}, {"refine_text": True}, {}):
            assert (await submit(**other))["joined"] is False, other


async def test_every_prosody_field_is_refused_clearly(redis: Redis, make_settings: Any) -> None:
    """Out of range, wrong type, a contradiction: a 422 naming the field, on the submit and on a style."""
    async with keyed(make_settings) as (client, _):
        tts, admin = await new_key(redis, "tts"), await new_key(redis, "admin")
        cases: list[tuple[dict[str, Any], str]] = [
            ({"oral": 10}, "oral"),
            ({"oral": -1}, "oral"),
            ({"laugh": 3}, "laugh"),
            ({"break": 8}, "break"),
            ({"break": "2"}, "break"),
            ({"oral": 1.5}, "oral"),
            ({"laugh": True}, "laugh"),
            ({"refine_text": False, "oral": 2}, "oral"),
            ({"style": "no such style"}, "style"),
            ({"style": 5}, "style"),
        ]
        for fields, field in cases:
            answer = await client.post("/v1/tts/submit", json={"text": "Hi.", **fields}, headers=bearer(tts))
            assert answer.status_code == 422, (fields, answer.text)
            assert answer.json()["detail"][0]["loc"][-1] == field, (fields, answer.json())
            if "style" in fields:
                continue
            made = await client.post("/v1/styles", json={"name": "x", **fields}, headers=bearer(admin))
            assert made.status_code == 422 and made.json()["detail"][0]["loc"][-1] == field, (fields, made.text)
        raw = b'{"name": "x", "temperature": NaN}'
        nan = await client.post("/v1/styles", content=raw, headers={**bearer(admin), "Content-Type": "application/json"})
        assert nan.status_code == 422
        bad_name = await client.post("/v1/styles", json={"name": "no spaces"}, headers=bearer(admin))
        assert bad_name.status_code == 422 and bad_name.json()["detail"][0]["loc"][-1] == "name"


async def test_a_dialogue_takes_the_levels_and_a_style_for_itself_and_for_each_line(redis: Redis, make_settings: Any) -> None:
    """The dialogue's style and levels are every line's; a line's own style and levels over them, for that line
    alone; what does not hold for a line is refused naming it."""
    voices = {"A": "zh_female", "B": "zh_male"}
    lines: list[dict[str, Any]] = [
        {"speaker": "A", "text": "One."},
        {"speaker": "B", "text": "Two.", "laugh": 2},
        {"speaker": "A", "text": "Three.", "style": "calm", "speed": 7},
        {"speaker": "B", "text": "Four.", "refine_text": False},
        {"speaker": "A", "text": "Five.", "break": 0},
    ]
    async with keyed(make_settings) as (client, _):
        tts = await new_key(redis, "tts")
        body = {"lines": lines, "voices": voices, "style": "chat", "oral": 3}
        answer = await client.post("/v1/tts/dialogue", json=body, headers=bearer(tts))
        assert answer.status_code == 202, answer.text
        job = await job_params(redis, answer.json()["task_id"])
        assert levels(job) == (6, 3, 1, 2, True), "the dialogue's style under its own oral"
        segments = job.segments or []
        own = [None if segment.sampling is None else levels(segment.sampling) for segment in segments]
        assert own == [None, (6, 3, 2, 2, True), (7, 4, 1, 4, True), (6, None, None, None, False), (6, 3, 1, 0, True)]

        other = await client.post("/v1/tts/dialogue", json={**body, "oral": 4}, headers=bearer(tts))
        assert (await job_params(redis, other.json()["task_id"])).cache_key != job.cache_key

        bad: list[tuple[dict[str, Any], str]] = [
            ({**body, "lines": [{"speaker": "A", "text": "Hi.", "refine_text": False, "oral": 2}]}, "lines.0"),
            ({**body, "lines": [{"speaker": "A", "text": "Hi.", "laugh": 3}]}, "lines.0.laugh"),
            ({**body, "lines": [{"speaker": "A", "text": "Hi.", "style": "nope"}]}, "lines.0.style"),
            ({**body, "style": "nope"}, "style"),
            ({**body, "refine_text": False}, "oral"),
        ]
        for wrong, field in bad:
            refused = await client.post("/v1/tts/dialogue", json=wrong, headers=bearer(tts))
            assert refused.status_code == 422, (wrong, refused.text)
            assert ".".join(str(part) for part in refused.json()["detail"][0]["loc"][1:]) == field, refused.json()
