"""Sharing scopes: the result cache and single-flight never become an oracle between API keys.

Each key shares cached results and jobs in flight only with itself, or with the keys an admin grouped
into its tenant (``CACHE_SCOPE=tenant``, the default); callers without a key share with each other;
``CACHE_SCOPE=global`` shares everything. Through the real app on a real Redis; the worker's part (run
the job, store its audio in the cache under the job's own key, complete it) is done here by hand, as
the worker does it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_security import bearer, new_key, submit
from ttsq.api.service import TTSService
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.cache import CachedAudio
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue

SECRET = {"text": "Your code is 4711.", "voice": "zh_female"}
"""What one tenant synthesises and another might guess."""


@asynccontextmanager
async def api(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(**{"auth": "on", **overrides})) as (client, app):
        yield client, app


async def run_next_job(app: FastAPI) -> str:
    """What a worker does with the next job: claim it, cache its audio under the job's own cache key, complete it."""
    service = cast(TTSService, app.state.service).tasks
    queue = JobQueue(service.queue.redis, queue_config())
    claim = await queue.leases.claim("worker", block_s=0.1)
    assert claim is not None
    key = claim.job.params.cache_key
    assert key is not None
    await service.cache.put(key, CachedAudio(b"audio of " + claim.job.id.encode(), "audio/wav", 1.0))
    await queue.leases.complete(claim.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=key)
    return claim.job.id


async def test_another_key_can_neither_join_nor_hit_what_a_key_synthesised(redis: Redis, make_settings: Any) -> None:
    """The cross-tenant oracle: B submitting A's text learns nothing — not A's task id, not ``joined``, not ``cached``."""
    async with api(make_settings) as (client, app):
        alice, bob = await new_key(redis, "tts"), await new_key(redis, "tts")
        first = (await submit(client, alice, **SECRET)).json()
        guess = await submit(client, bob, **SECRET)
        assert guess.status_code == 202
        assert guess.json()["joined"] is False and guess.json()["task_id"] != first["task_id"], "a job of its own"
        assert (await client.get(f"/v1/tts/tasks/{first['task_id']}", headers=bearer(bob))).status_code == 404

        again = (await submit(client, alice, **SECRET)).json()
        assert again["joined"] is True and again["task_id"] == first["task_id"], "within a key, joining works as before"

        assert await run_next_job(app) == first["task_id"]
        hit = await submit(client, alice, **SECRET)
        assert hit.status_code == 200 and hit.json()["cached"] is True, "within a key, the cache works as before"
        still = await submit(client, bob, **SECRET)
        assert still.status_code == 202 and still.json()["cached"] is False
        assert still.json()["task_id"] == guess.json()["task_id"], "bob joins only his own job"

        assert await run_next_job(app) == guess.json()["task_id"]
        assert (await submit(client, bob, **SECRET)).json()["cached"] is True, "bob's own result is his to reuse"


async def test_keys_an_admin_grouped_into_a_tenant_share_and_a_joiner_that_cancels_sees_cancelled(
    redis: Redis, make_settings: Any
) -> None:
    async with api(make_settings) as (client, app):
        first, second = await new_key(redis, "tts", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        outsider = await new_key(redis, "tts", tenant="other")
        task = (await submit(client, first, **SECRET)).json()["task_id"]
        joined = (await submit(client, second, **SECRET)).json()
        assert joined["joined"] is True and joined["task_id"] == task
        assert (await submit(client, outsider, **SECRET)).json()["joined"] is False

        cancelled = await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(second))
        assert cancelled.status_code == 200 and cancelled.json() == {"task_id": task, "status": "cancelled"}
        seen = await client.get(f"/v1/tts/tasks/{task}", headers=bearer(second))
        assert seen.status_code == 200 and seen.json()["status"] == "cancelled", "its own task id answers cancelled, not 404"
        assert (await client.get(f"/v1/tts/result/{task}", headers=bearer(second))).status_code == 409
        events = await client.get(f"/v1/tts/events/{task}", headers=bearer(second))
        statuses = [json.loads(line[6:])["status"] for line in events.text.splitlines() if line.startswith("data: ")]
        assert statuses == ["cancelled"]
        assert (await client.get(f"/v1/tts/stream/{task}", headers=bearer(second))).status_code == 409
        again = await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(second))
        assert again.status_code == 200 and again.json()["status"] == "cancelled"
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(first))).json()["status"] == "queued", (
            "a detached caller's second cancel is not the others' cancel"
        )

        rejoined = (await submit(client, second, **SECRET)).json()
        assert rejoined["joined"] is True and rejoined["task_id"] == task
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(second))).json()["status"] == "queued"

        await run_next_job(app)
        assert (await client.get(f"/v1/tts/result/{task}", headers=bearer(second))).status_code == 200
        assert (await submit(client, second, **SECRET)).json()["cached"] is True, "one tenant, one cache"
        assert (await submit(client, outsider, **SECRET)).json()["cached"] is False


async def test_regrouping_a_key_moves_it_to_its_new_tenants_scope(redis: Redis, make_settings: Any) -> None:
    async with api(make_settings) as (client, _):
        member, loner = await new_key(redis, "tts", tenant="acme"), await new_key(redis, "tts")
        task = (await submit(client, member, **SECRET)).json()["task_id"]
        assert (await submit(client, loner, **SECRET)).json()["joined"] is False
        store = ApiKeyStore(redis, Keys("ttsq"))
        grouped = await store.set_tenant(loner.split("_")[1], "acme")
        assert grouped is not None and grouped.tenant == "acme"
        moved = (await submit(client, loner, **SECRET)).json()
        assert moved["joined"] is True and moved["task_id"] == task
        assert await store.set_tenant("000000000000", "acme") is None


async def test_one_tenant_deployments_may_share_everything(redis: Redis, make_settings: Any) -> None:
    """``CACHE_SCOPE=global``: the operator's choice for a single tenant — every key joins and hits every other's."""
    async with api(make_settings, cache_scope="global") as (client, app):
        alice, bob = await new_key(redis, "tts"), await new_key(redis, "tts")
        task = (await submit(client, alice, **SECRET)).json()["task_id"]
        joined = (await submit(client, bob, **SECRET)).json()
        assert joined["joined"] is True and joined["task_id"] == task
        await run_next_job(app)
        assert (await submit(client, bob, **SECRET)).json()["cached"] is True


async def test_callers_without_a_key_share_with_each_other_and_never_with_a_key(redis: Redis, make_settings: Any) -> None:
    """Keys optional (loopback): anonymous callers can read any task whose id they hold, so they share among themselves
    (as ``AUTH=off`` does); a key shares nothing with them."""
    async with api_client(make_settings()) as (client, app):
        key = await new_key(redis, "tts")
        anonymous = (await submit(client, None, **SECRET)).json()
        other = (await submit(client, None, **SECRET)).json()
        assert other["joined"] is True and other["task_id"] == anonymous["task_id"]
        keyed = (await submit(client, key, **SECRET)).json()
        assert keyed["joined"] is False and keyed["task_id"] != anonymous["task_id"]
        assert await run_next_job(app) == anonymous["task_id"]
        assert (await submit(client, None, **SECRET)).json()["cached"] is True
        assert (await submit(client, key, **SECRET)).json()["cached"] is False
