"""Voices belong to a tenant: through the real app on a real Redis, with two tenants' keys.

A key's voices are its tenant's (the tenant an admin grouped it into, else the key alone); an admin makes a global
one with ``"shared": true``. Another tenant's voice is absent to a key — 404 on fetch and delete, no name in a list
or in the 422 for an unknown voice, not usable alone, in a blend or on the OpenAI route, not compared against in a
draw — and a ``tts`` key is never shown a prompt, transcript or embedding. The cache key names a tenant voice's
owner, so two tenants' voices made alike never share audio, even with ``CACHE_SCOPE=global``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_security import bearer, new_key
from tests.unit.api.test_tenants import run_next_job
from tests.unit.api.test_voices import embedding
from ttsq.store.draws import DrawStore
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue
from ttsq.store.voices import VoiceRegistry

EMBEDDING = embedding(np.linspace(-1, 1, 64))


@asynccontextmanager
async def keyed(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(**{"auth": "on", **overrides})) as (client, app):
        yield client, app


async def names(client: httpx.AsyncClient, key: str, path: str = "/v1/voices") -> set[str]:
    answer = await client.get(path, headers=bearer(key))
    assert answer.status_code == 200, answer.text
    return {voice["name"] for voice in answer.json()["voices"]}


async def speak(client: httpx.AsyncClient, key: str, voice: str, text: str = "Hello.") -> httpx.Response:
    return await client.post("/v1/tts/submit", json={"text": text, "voice": voice}, headers=bearer(key))


async def test_a_tenants_voice_is_its_own_and_absent_to_another_tenant(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        acme_admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other_admin, other = await new_key(redis, "admin", tenant="other"), await new_key(redis, "tts", tenant="other")
        created = await client.post("/v1/voices", json={"name": "anna", "embedding": EMBEDDING}, headers=bearer(acme_admin))
        assert created.status_code == 201 and created.json()["owner"] == "tenant:acme", created.text

        assert "anna" in await names(client, acme), "the tenant's keys see it"
        seen = (await client.get("/v1/voices/anna", headers=bearer(acme))).json()
        assert seen["owner"] == "tenant:acme" and seen["embedding"] is None, "a tts key is not shown the embedding"
        used = await speak(client, acme, "anna")
        assert used.status_code == 202, used.text
        job = await JobQueue(redis, queue_config()).get(used.json()["task_id"])
        assert job is not None and job.params.speaker_embedding == EMBEDDING and job.params.voice_owner == "tenant:acme"

        assert "anna" not in await names(client, other)
        assert "anna" not in await names(client, other_admin), "an admin sees its own tenant's view unless it names another"
        for key in (other, other_admin):
            missing = await client.get("/v1/voices/anna", headers=bearer(key))
            assert missing.status_code == 404 and missing.json()["detail"] == "no voice named 'anna'", "as if it never existed"
        refused = await speak(client, other, "anna")
        assert refused.status_code == 422
        message = refused.json()["detail"][0]["msg"]
        assert message.startswith("unknown voice 'anna'") and "anna" not in message.partition("available:")[2], message
        assert "zh_female" in message, "the voices it does see are listed"
        blended = await speak(client, other, "zh_female*0.5+anna*0.5")
        assert blended.status_code == 422 and "unknown voice 'anna' in the blend" in blended.text
        stored_blend = {"name": "mix", "components": [{"voice": "zh_male", "weight": 1}, {"voice": "anna", "weight": 1}]}
        assert (await client.post("/v1/voices", json=stored_blend, headers=bearer(other_admin))).status_code == 422

        openai = await client.post(
            "/v1/audio/speech", json={"model": "tts-1", "input": "Hello.", "voice": "anna"}, headers=bearer(other)
        )
        assert openai.status_code == 400, openai.text
        said = openai.json()["error"]["message"]
        assert said.startswith("voice: 'anna' is not supported") and "anna" not in said.partition("use one of:")[2], said
        listing = (await client.get("/v1/audio/voices", headers=bearer(other))).json()
        assert "anna" not in {voice["id"] for voice in listing["data"]}
        assert "anna" in {voice["id"] for voice in (await client.get("/v1/audio/voices", headers=bearer(acme))).json()["data"]}

        assert (await client.delete("/v1/voices/anna", headers=bearer(other_admin))).status_code == 404
        assert "anna" in await names(client, acme), "another tenant's admin deleted nothing by the name"


async def test_an_admin_acts_in_another_tenants_view_only_by_naming_it(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        acme_admin, ops = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "admin")
        acme, loner = await new_key(redis, "tts", tenant="acme"), await new_key(redis, "tts")
        made = await client.post("/v1/voices", json={"name": "bob", "seed": 7, "tenant": "acme"}, headers=bearer(ops))
        assert made.status_code == 201 and made.json()["owner"] == "tenant:acme", "an admin makes a voice for a tenant"
        assert "bob" in await names(client, acme) and "bob" not in await names(client, ops)
        assert "bob" in await names(client, ops, "/v1/voices?tenant=acme")
        assert (await client.get("/v1/voices/bob?tenant=acme", headers=bearer(ops))).json()["seed"] == 7

        own = await client.post(
            "/v1/voices", json={"name": "solo", "seed": 8, "tenant": f"key:{loner.split('_')[1]}"}, headers=bearer(ops)
        )
        assert own.status_code == 201 and "solo" in await names(client, loner), "a key that is a tenant of its own, by key:<id>"

        peek = await client.get("/v1/voices?tenant=acme", headers=bearer(loner))
        assert peek.status_code == 403 and "admin" in peek.text, "a tts key looks at its own tenant's voices only"
        bad = await client.get("/v1/voices?tenant=no%20such%20thing", headers=bearer(ops))
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "tenant"]
        both = await client.post("/v1/voices", json={"name": "x", "seed": 1, "shared": True, "tenant": "acme"}, headers=bearer(ops))
        assert both.status_code == 422 and "not both" in both.text

        assert (await client.delete("/v1/voices/bob", headers=bearer(acme_admin))).status_code == 204, "the tenant's admin"
        assert (await client.get("/v1/voices/bob", headers=bearer(acme))).status_code == 404


async def test_shared_voices_are_global_and_a_tenant_cannot_shadow_one(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        admin, acme, other = await new_key(redis, "admin"), await new_key(redis, "tts", tenant="acme"), await new_key(redis, "tts")
        shared = await client.post("/v1/voices", json={"name": "narrator", "seed": 1234, "shared": True}, headers=bearer(admin))
        assert shared.status_code == 201 and shared.json()["owner"] is None
        for key in (acme, other):
            assert "narrator" in await names(client, key)
            assert (await speak(client, key, "narrator")).status_code == 202
        acme_admin = await new_key(redis, "admin", tenant="acme")
        shadow = await client.post("/v1/voices", json={"name": "narrator", "seed": 1}, headers=bearer(acme_admin))
        assert shadow.status_code == 409, "a tenant's own voice would hide the global one from it"


async def test_a_reference_voices_prompt_and_transcript_are_shown_to_admins_only(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        registry = VoiceRegistry(redis, Keys("ttsq"))
        await registry.create_reference("cloned", "tenant:acme", prompt="codes of a person's voice", transcript="what they said")
        duet = {"name": "duet", "components": [{"voice": "zh_female", "weight": 1}, {"voice": "emb", "weight": 1}]}
        assert (
            await client.post("/v1/voices", json={"name": "emb", "embedding": EMBEDDING}, headers=bearer(admin))
        ).status_code == 201
        assert (await client.post("/v1/voices", json=duet, headers=bearer(admin))).status_code == 201

        to_tts = (await client.get("/v1/voices/cloned", headers=bearer(acme))).json()
        assert to_tts["kind"] == "reference" and to_tts["prompt"] is None and to_tts["transcript"] is None
        listed = {v["name"]: v for v in (await client.get("/v1/voices", headers=bearer(acme))).json()["voices"]}
        assert listed["cloned"]["prompt"] is None and listed["cloned"]["transcript"] is None
        blend = (await client.get("/v1/voices/duet", headers=bearer(acme))).json()
        assert [part["embedding"] for part in blend["components"]] == [None, None], "a blend's embeddings are not shown either"
        to_admin = (await client.get("/v1/voices/cloned", headers=bearer(admin))).json()
        assert to_admin["prompt"] == "codes of a person's voice" and to_admin["transcript"] == "what they said"

        used = await speak(client, acme, "cloned")
        job = await JobQueue(redis, queue_config()).get(used.json()["task_id"])
        assert job is not None and job.params.speaker_prompt == "codes of a person's voice", "still synthesised with it"


async def test_two_tenants_voices_made_alike_never_share_cached_audio(redis: Redis, make_settings: Any) -> None:
    """With ``CACHE_SCOPE=global`` the caller's scope is not in the key; the voice's owner is."""
    async with keyed(make_settings, cache_scope="global") as (client, app):
        acme_admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other_admin, other = await new_key(redis, "admin", tenant="other"), await new_key(redis, "tts", tenant="other")
        for admin in (acme_admin, other_admin):
            assert (await client.post("/v1/voices", json={"name": "narrator", "seed": 5}, headers=bearer(admin))).status_code == 201
        first = await speak(client, acme, "narrator")
        assert first.status_code == 202
        assert await run_next_job(app) == first.json()["task_id"]
        assert (await speak(client, acme, "narrator")).json()["cached"] is True, "the tenant's own repeat hits"
        theirs = await speak(client, other, "narrator")
        assert theirs.status_code == 202 and theirs.json()["cached"] is False and theirs.json()["joined"] is False

        builtin = await speak(client, acme, "zh_female", "Shared.")
        joined = await speak(client, other, "zh_female", "Shared.")
        assert joined.json()["joined"] is True and joined.json()["task_id"] == builtin.json()["task_id"], (
            "global voices still share"
        )


async def test_a_draw_measures_against_the_callers_voices_only(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _):
        acme_admin, other = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="other")
        assert (await client.post("/v1/voices", json={"name": "secret", "seed": 99}, headers=bearer(acme_admin))).status_code == 201
        draw = await client.post("/v1/voices/draw", json={"n": 1}, headers=bearer(other))
        assert draw.status_code == 202, draw.text
        stored = await DrawStore(redis, Keys("ttsq"), 60).get(draw.json()["draw_id"])
        assert stored is not None and [ref.voice for ref in stored.references] == ["zh_female", "zh_male"]


async def test_without_keys_every_caller_is_one_tenant_whose_voices_are_global(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/voices", json={"name": "house", "seed": 3})
    assert created.status_code == 201 and created.json()["owner"] is None
    assert (await client.get("/v1/voices/house")).json()["seed"] == 3
    assert (await client.post("/v1/tts/submit", json={"text": "hi", "voice": "house"})).status_code == 202


async def test_a_job_carries_its_tenants_voice_so_a_later_voice_of_that_name_cannot_change_it(
    redis: Redis, make_settings: Any
) -> None:
    """The worker's side: it never looks a voice up by name. What a job speaks with was resolved in its submitter's
    tenant when it was accepted, and travels in the job with the voice's owner, so another tenant making a voice of
    the same name while it waits (a race for the name) reaches nothing the worker claims."""
    async with keyed(make_settings) as (client, _):
        acme_admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other_admin = await new_key(redis, "admin", tenant="other")
        assert (await client.post("/v1/voices", json={"name": "anna", "seed": 77}, headers=bearer(acme_admin))).status_code == 201
        task = (await speak(client, acme, "anna")).json()["task_id"]
        assert (await client.delete("/v1/voices/anna", headers=bearer(acme_admin))).status_code == 204
        assert (await client.post("/v1/voices", json={"name": "anna", "seed": 5}, headers=bearer(other_admin))).status_code == 201

        claim = await JobQueue(redis, queue_config()).leases.claim("worker", block_s=0.1)
        assert claim is not None and claim.job.id == task
        assert claim.job.tenant == "tenant:acme"
        params = claim.job.params
        assert (params.voice, params.speaker_seed, params.voice_owner) == ("anna", 77, "tenant:acme")
