"""API keys, scopes, task ownership, rate limits, per-key quotas, cancellation, CORS and headers —
through the real app (lifespan included) on a real Redis."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from redis.asyncio import Redis

from tests.conftest import api_client, claimed, queue_config
from ttsq.api.headers import CONTENT_SECURITY_POLICY
from ttsq.api.schemas import SubmitRequest
from ttsq.domain.voices import builtin
from ttsq.store.api_keys import ApiKeyStore, Scope
from ttsq.store.cache import CachedAudio
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue


@asynccontextmanager
async def keyed_api(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(**{"auth": "on", **overrides})) as (client, app):
        yield client, app


async def new_key(redis: Redis, *scopes: Scope, **options: Any) -> str:
    key, _ = await ApiKeyStore(redis, Keys("ttsq")).create("test", list(scopes), **options)
    return key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(client: httpx.AsyncClient, key: str | None, **body: Any) -> httpx.Response:
    headers = bearer(key) if key else {}
    return await client.post("/v1/tts/submit", json={"text": "Hello.", "seed": 1, **body}, headers=headers)


async def test_keys_are_required_when_on_and_accepted_as_bearer_or_x_api_key(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (client, _):
        key = await new_key(redis, "tts")
        missing = await submit(client, None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        assert "needs an API key" in missing.json()["detail"]
        wrong = await submit(client, "ttsq_0123456789ab_" + "x" * 43)
        assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]
        assert (await submit(client, key)).status_code == 202
        as_header = await client.post("/v1/tts/submit", json={"text": "Hi.", "seed": 2}, headers={"X-API-Key": key})
        assert as_header.status_code == 202
        assert (await client.get("/healthz")).status_code == 200, "probes never need a key"


async def test_the_openai_routes_answer_401_and_403_in_openai_shape(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (_, app):
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://ttsq.test")
        anonymous = openai.AsyncOpenAI(base_url="http://ttsq.test/v1", api_key="not-a-key", max_retries=0, http_client=http)
        with pytest.raises(openai.AuthenticationError) as caught:
            await anonymous.audio.speech.create(model="tts-1", voice="alloy", input="hi")
        assert set(caught.value.response.json()) == {"error"}


async def test_scopes_keys_are_hashed_and_a_revocation_holds_on_every_replica(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (first, _), keyed_api(make_settings) as (second, _):
        user, admin = await new_key(redis, "tts"), await new_key(redis, "admin")
        voice = {"name": "narrator", "seed": 5}
        denied = await first.post("/v1/voices", json=voice, headers=bearer(user))
        assert denied.status_code == 403 and "'admin' scope" in denied.json()["detail"]
        assert (await first.post("/v1/voices", json=voice, headers=bearer(admin))).status_code == 201
        assert (await first.get("/v1/voices", headers=bearer(user))).status_code == 200

        records = await redis.hvals(Keys("ttsq").api_keys)
        stored = b"".join([value if isinstance(value, bytes) else value.encode() for value in records])
        assert user.encode() not in stored and admin.encode() not in stored, "only digests are stored"

        assert (await second.get("/v1/voices", headers=bearer(user))).status_code == 200
        key_id = user.split("_")[1]
        assert await ApiKeyStore(redis, Keys("ttsq")).revoke(key_id)
        assert (await first.get("/v1/voices", headers=bearer(user))).status_code == 401
        assert (await second.get("/v1/voices", headers=bearer(user))).status_code == 401, "no replica caches a key"


async def test_an_expired_key_is_refused(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (client, _):
        expired = await new_key(redis, "tts", expires_at=time.time() - 1)
        assert (await submit(client, expired)).status_code == 401


async def test_another_keys_task_is_not_found_and_admins_see_every_task(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (client, _):
        owner, stranger, admin = await new_key(redis, "tts"), await new_key(redis, "tts"), await new_key(redis, "admin")
        task = (await submit(client, owner)).json()["task_id"]
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(owner))).status_code == 200
        other = await client.get(f"/v1/tts/tasks/{task}", headers=bearer(stranger))
        unknown = await client.get(f"/v1/tts/tasks/{task.split('.')[0]}.AAAAAAAAAAAAAAAA", headers=bearer(stranger))
        assert other.status_code == unknown.status_code == 404, "no existence oracle"
        assert other.json()["detail"].replace(task, "ID") == unknown.json()["detail"].replace(
            unknown.request.url.path.split("/")[-1], "ID"
        )
        assert (await client.get(f"/v1/tts/result/{task}", headers=bearer(stranger))).status_code == 404
        assert (await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(stranger))).status_code == 404
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(admin))).status_code == 200


async def test_the_rate_limit_is_per_key_with_ratelimit_headers(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings, rate_limit_burst=3, rate_limit_per_s=0.01) as (client, _):
        busy, quiet = await new_key(redis, "tts"), await new_key(redis, "tts")
        answers = [await submit(client, busy, seed=n) for n in range(4)]
        assert [a.status_code for a in answers] == [202, 202, 202, 429]
        assert answers[0].headers["ratelimit-limit"] == "3" and answers[0].headers["ratelimit-remaining"] == "2"
        refused = answers[3]
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["ratelimit-remaining"] == "0"
        assert "too many requests" in refused.json()["detail"]
        assert (await submit(client, quiet)).status_code == 202, "another key has its own bucket"


async def test_an_empty_bucket_is_one_answer_whichever_way_the_submit_would_have_gone(redis: Redis, make_settings: Any) -> None:
    """The enqueue script's refusal and a cache hit's own payment are translated into 429 in one place: the same
    sentence and the bucket's headers, in the native and the OpenAI shape, each counted as ``rate_limited``."""
    async with api_client(make_settings(rate_limit_burst=1, rate_limit_per_s=0.01)) as (client, app):
        service = app.state.service
        body = {"text": "From the cache.", "voice": "zh_female", "seed": 1}
        params = service.tasks.build_params(SubmitRequest(**body), builtin("zh_female"))
        await service.tasks.cache.put(params.cache_key, CachedAudio(b"audio", "audio/mpeg", 1.0))
        assert (await submit(client, None, seed=2)).status_code == 202, "the one token"
        would_queue = await submit(client, None, seed=3)
        would_hit = await submit(client, None, **body)
        speech = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hello.", "voice": "alloy"})
        for refused in (would_queue, would_hit, speech):
            assert refused.status_code == 429, refused.text
            assert refused.headers["ratelimit-remaining"] == "0" and int(refused.headers["retry-after"]) >= 1
        detail = would_queue.json()["detail"]
        assert detail.startswith("too many requests: 1 may burst") and would_hit.json() == {"detail": detail}
        assert speech.json()["error"]["type"] == "rate_limit_error" and speech.json()["error"]["message"] == detail
        metrics = (await client.get("/metrics")).text
    assert 'ttsq_submits_total{outcome="rate_limited"} 3.0' in metrics.splitlines()


async def test_anonymous_clients_are_limited_by_address(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(rate_limit_burst=2, rate_limit_per_s=0.01)) as (client, _):
        codes = [(await submit(client, None, seed=n)).status_code for n in range(3)]
        assert codes == [202, 202, 429]
        assert await redis.exists(Keys("ttsq").rate_limit("addr:127.0.0.1"))


async def test_every_valid_submit_pays_once_and_a_refused_one_records_nothing(redis: Redis, make_settings: Any) -> None:
    """The token is taken inside the script that queues the job: a join and a cache hit pay too, an
    invalid request does not, a retry past a stale single-flight marker pays once, and a refusal leaves
    no job behind."""
    async with api_client(make_settings(rate_limit_burst=5, rate_limit_per_s=0.001)) as (client, app):
        service = app.state.service
        queue = JobQueue(redis, queue_config())

        def remaining(answer: httpx.Response) -> int:
            assert answer.status_code in (200, 202), answer.text
            return int(answer.headers["ratelimit-remaining"])

        first = await submit(client, None, text="Queued once.", voice="zh_female")
        assert remaining(first) == 4
        joined = await submit(client, None, text="Queued once.", voice="zh_female")
        assert joined.json()["joined"] is True and remaining(joined) == 3
        assert (await submit(client, None, text="")).status_code == 422
        assert (await submit(client, None, voice="no-such-voice")).status_code == 422

        # A stale single-flight marker: the job ended without clearing it, so the script is run twice.
        held = await claimed(queue)
        await queue.leases.complete(held.job, b"audio", "audio/mpeg", 1.0, 0.1, cache_key=None)
        again = await submit(client, None, text="Queued once.", voice="zh_female")
        assert again.json()["joined"] is False and remaining(again) == 2, "paid once, not once per attempt"

        body = {"text": "From the cache.", "voice": "zh_female", "seed": 1}  # submit() sends seed 1 unless told
        params = service.tasks.build_params(SubmitRequest(**body), builtin("zh_female"))
        await service.tasks.cache.put(params.cache_key, CachedAudio(b"audio", "audio/mpeg", 1.0))
        hit = await submit(client, None, **body)
        assert hit.status_code == 200 and hit.json()["cached"] is True and remaining(hit) == 1

        assert remaining(await submit(client, None, seed=11)) == 0
        depth = await redis.llen(queue.keys.queue)
        jobs = len([key async for key in redis.scan_iter(match=queue.keys.job("*"))])
        refused = await submit(client, None, seed=12)
        assert refused.status_code == 429 and refused.headers["ratelimit-remaining"] == "0"
        assert int(refused.headers["retry-after"]) >= 1
        assert await redis.llen(queue.keys.queue) == depth, "a refused submit queues nothing"
        assert len([key async for key in redis.scan_iter(match=queue.keys.job("*"))]) == jobs, "and records nothing"
        assert (await submit(client, None, **body)).status_code == 429, "a cache hit is refused too"


async def test_a_key_cannot_fill_the_shared_queue_and_others_get_their_turn(redis: Redis, make_settings: Any) -> None:
    """The fairness policy: a per-key cap on jobs queued or running, then each key's turn in the round robin
    (docs/fairness.md): the other key's job comes right after the flooding key's first, not after all of them."""
    async with keyed_api(make_settings, max_queued_per_key=2) as (client, _):
        flood, other = await new_key(redis, "tts"), await new_key(redis, "tts")
        first = (await submit(client, flood, seed=1)).json()
        assert (await submit(client, flood, seed=2)).status_code == 202
        capped = await submit(client, flood, seed=3)
        assert capped.status_code == 429 and "MAX_QUEUED_PER_KEY=2" in capped.json()["detail"]
        assert capped.headers["retry-after"]
        late = (await submit(client, other, seed=4)).json()
        assert late["queue_position"] == 1, "the other key waits for the flooding key's turn, not its whole backlog"

        queue = JobQueue(redis, queue_config())
        claim = await queue.leases.claim("w", block_s=0.1)
        assert claim is not None and claim.job.id == first["task_id"]
        second = await queue.leases.claim("w", block_s=0.1)
        assert second is not None and second.job.id == late["task_id"], "then the other key's turn"
        await queue.leases.complete(claim.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)
        assert (await submit(client, flood, seed=5)).status_code == 202, "a finished job frees its place"


async def test_cancelling_a_queued_task_removes_it_and_is_idempotent(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings, max_queued_per_key=1) as (client, _):
        key = await new_key(redis, "tts")
        task = (await submit(client, key)).json()["task_id"]
        queue = JobQueue(redis, queue_config())
        assert await queue.depth() == 1
        for _ in range(2):
            cancelled = await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(key))
            assert cancelled.status_code == 200 and cancelled.json() == {"task_id": task, "status": "cancelled"}
        assert await queue.depth() == 0
        status = (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(key))).json()
        assert status["status"] == "cancelled"
        assert (await client.get(f"/v1/tts/result/{task}", headers=bearer(key))).status_code == 409
        assert (await submit(client, key, seed=9)).status_code == 202, "the cancelled job freed the key's place"


async def test_cancelling_a_running_task_drops_its_result_when_the_batch_ends(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        task = (await submit(client, None)).json()["task_id"]
        queue = JobQueue(redis, queue_config())
        claim = await queue.leases.claim("w", block_s=0.1)
        assert claim is not None
        cancelling = await client.delete(f"/v1/tts/tasks/{task}")
        assert cancelling.status_code == 202 and cancelling.json()["status"] == "cancelling"
        assert str(await queue.leases.complete(claim.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)) == "cancelled"
        assert await queue.result(task) is None
        assert (await client.get(f"/v1/tts/tasks/{task}")).json()["status"] == "cancelled"
        assert (await client.delete(f"/v1/tts/tasks/{task}")).status_code == 200


async def test_a_joiners_cancel_leaves_the_job_to_the_others(redis: Redis, make_settings: Any) -> None:
    """Keys share jobs in flight when an operator opts in (``CACHE_SCOPE=global``); a joiner's cancel detaches it alone,
    and its task id answers it ``cancelled`` from then on (tests/unit/api/test_tenants.py: the same within a tenant)."""
    async with keyed_api(make_settings, cache_scope="global") as (client, _):
        first, joiner = await new_key(redis, "tts"), await new_key(redis, "tts")
        body = {"text": "Shared sentence.", "voice": "zh_female"}
        task = (await submit(client, first, **body)).json()["task_id"]
        joined = (await submit(client, joiner, **body)).json()
        assert joined["joined"] is True and joined["task_id"] == task
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(joiner))).status_code == 200
        detached = await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(joiner))
        assert detached.status_code == 200 and detached.json()["status"] == "cancelled"
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(first))).json()["status"] == "queued"
        assert (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(joiner))).json()["status"] == "cancelled"
        assert (await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(first))).json()["status"] == "cancelled"


async def test_keyed_and_anonymous_callers_share_work_but_never_each_others_cancel(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(cache_scope="global")) as (client, _):  # keys optional: both kinds of caller
        key = await new_key(redis, "tts")
        body = {"text": "Shared by all.", "voice": "zh_male"}
        anonymous = (await submit(client, None, **body)).json()
        keyed = (await submit(client, key, **body)).json()
        assert keyed["joined"] is True and keyed["task_id"] == anonymous["task_id"], "a key may join an anonymous job"
        task = anonymous["task_id"]
        assert (await client.delete(f"/v1/tts/tasks/{task}", headers=bearer(key))).json()["status"] == "cancelled"
        assert (await client.get(f"/v1/tts/tasks/{task}")).json()["status"] == "queued", "the key only detached itself"
        assert (await client.delete(f"/v1/tts/tasks/{task}")).json()["status"] == "cancelled"
        assert (await client.get(f"/v1/tts/tasks/{task}")).json()["status"] == "cancelled", "the last holder cancels it"

        other = {"text": "A keyed job first.", "voice": "zh_male"}
        first = (await submit(client, key, **other)).json()
        second = (await submit(client, None, **other)).json()
        assert second["joined"] is False and second["task_id"] != first["task_id"], (
            "an anonymous caller never joins a keyed job: it could not read it"
        )
        assert (await client.get(f"/v1/tts/tasks/{second['task_id']}")).status_code == 200
        assert (await client.get(f"/v1/tts/tasks/{first['task_id']}")).status_code == 404


async def test_cors_is_off_by_default_and_follows_the_allow_list(redis: Redis, make_settings: Any) -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    async with api_client(make_settings()) as (client, _):
        answer = await client.options("/v1/tts/submit", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
    async with api_client(make_settings(cors_origins="https://app.example")) as (client, _):
        allowed = await client.options("/v1/tts/submit", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        assert allowed.headers["access-control-allow-credentials"] == "true"
        other = await client.options("/v1/tts/submit", headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    async with api_client(make_settings(cors_origins="*")) as (client, _):
        anyone = await client.get("/healthz", headers={"Origin": "https://evil.example"})
        assert anyone.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in anyone.headers, "credentials never with a wildcard"


async def test_the_page_has_a_strict_content_security_policy(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        page = await client.get("/")
        api = await client.get("/healthz")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    for answer in (page, api):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["referrer-policy"] == "no-referrer"


async def test_a_bug_answers_500_with_a_request_id_and_no_trace(
    redis: Redis, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ttsq.api.service import TaskService

    async def broken(*_: Any, **__: Any) -> None:
        raise KeyError("/secret/internal/path.py")

    monkeypatch.setattr(TaskService, "submit", broken)
    async with api_client(make_settings()) as (_, app):
        # as a server does: the 500 goes out, the exception is re-raised for the server's log only
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://ttsq.test") as client:
            answer = await client.post("/v1/tts/submit", json={"text": "x", "seed": 1}, headers={"X-Request-ID": "bug-1"})
    assert answer.status_code == 500
    assert answer.json() == {"detail": "internal error; quote request id bug-1 when reporting it"}
    assert "Traceback" not in answer.text and "/secret" not in answer.text


async def test_callback_urls_need_webhooks_configured_and_a_sane_shape(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        off = await submit(client, None, callback_url="https://hooks.example/tts")
        assert off.status_code == 422 and "not configured" in str(off.json())
    async with api_client(make_settings(webhook_secret="0123456789abcdef0123", public_url="https://tts.test")) as (client, _):
        long_label = f"https://{'a' * 64}.example/x"  # the IDNA codec inside getaddrinfo raised UnicodeError: a 500
        for bad in ("ftp://hooks.example/x", "https://user:pw@hooks.example/x", "not a url", long_label,
                    "https://hooks.example:0/x", "https://hooks.example:99999/x"):  # fmt: skip
            assert (await submit(client, None, callback_url=bad)).status_code == 422, bad
        for internal in ("http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:8000/v1/voices", "http://10.1.2.3/x",
                         "http://[::1]/x", "http://0.0.0.0/x", "http://224.0.0.1/x"):  # fmt: skip
            refused = await submit(client, None, callback_url=internal)
            assert refused.status_code == 422 and "callback_url" in str(refused.json()), internal
        assert (await submit(client, None, callback_url="https://hooks.example/tts")).status_code == 202


async def test_a_keys_default_callback_url_applies_unless_the_submit_names_another(redis: Redis, make_settings: Any) -> None:
    config = make_settings(auth="on", webhook_secret="0123456789abcdef0123", public_url="https://tts.test")
    async with api_client(config) as (client, _):
        key = await new_key(redis, "tts", callback_url="https://hooks.example/default")
        task = (await submit(client, key, seed=31)).json()["task_id"]
        status = (await client.get(f"/v1/tts/tasks/{task}", headers=bearer(key))).json()
        assert status["webhook"] == {
            "state": "pending",
            "attempts": 0,
            "last_status_code": None,
            "last_error": None,
            "last_attempt_at": None,
            "next_attempt_at": None,
        }, "the key's default callback was taken"
        job = await JobQueue(redis, config.queue_config()).get(task)
        assert job is not None and job.params.callback_url == "https://hooks.example/default"
        own = (await submit(client, key, seed=32, callback_url="https://hooks.example/own")).json()["task_id"]
        own_job = await JobQueue(redis, config.queue_config()).get(own)
        assert own_job is not None and own_job.params.callback_url == "https://hooks.example/own"
        other = await new_key(redis, "tts")
        plain = (await submit(client, other, seed=33)).json()["task_id"]
        assert (await client.get(f"/v1/tts/tasks/{plain}", headers=bearer(other))).json()["webhook"] is None, (
            "a key without a default asks for no webhook"
        )


def ready(answer: httpx.Response) -> dict[str, Any]:
    """What a readiness answer says (its fields that are set)."""
    assert answer.status_code == 200, answer.text
    return {name: value for name, value in answer.json().items() if value is not None}


PUBLIC_WITH_KEYS_REQUIRED = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/"), ("HEAD", "/")}
"""What answers a caller without a key where keys are required (besides the page's static files): the probes, which
say up or not and nothing more, and the page, which holds no data."""


async def test_anyone_who_can_connect_gets_nothing_but_a_401_where_keys_are_required(redis: Redis, make_settings: Any) -> None:
    """docs/security.md's table, as written: every route of the app — the API, the documentation and the metrics — is a
    401 without a key, but the probes (no numbers) and the page. A route added without a caller fails here."""
    async with keyed_api(make_settings) as (client, app):
        documented = [(method.upper(), path) for path, operations in app.openapi()["paths"].items() for method in operations]
        undocumented = [(method, r.path) for r in app.routes if isinstance(r, APIRoute) for method in sorted(r.methods or ())]
        routes = documented + undocumented  # the routers' routes are all in the schema; the app's own are not
        assert {"/metrics", "/docs", "/redoc", "/openapi.json", "/v1/tts/submit"} <= {path for _, path in routes}
        for method, path in routes:
            answer = await client.request(method, re.sub(r"\{[^}]+\}", "x", path), json={})
            if (method, path) in PUBLIC_WITH_KEYS_REQUIRED:
                assert answer.status_code == 200, (method, path, answer.text)
            else:
                assert answer.status_code == 401, (method, path, answer.status_code, answer.text[:200])
        assert ready(await client.get("/readyz")) == {"status": "ready", "redis": "ok"}, "the probes show no numbers"
        assert (await client.get("/static/app.js")).status_code == 200, "the page's own files hold no data"


async def test_metrics_need_the_metrics_scope_and_docs_follow_api_docs(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (client, _):
        prometheus, user, admin = await new_key(redis, "metrics"), await new_key(redis, "tts"), await new_key(redis, "admin")
        scraped = await client.get("/metrics", headers=bearer(prometheus))
        assert scraped.status_code == 200 and "ttsq_queue_depth" in scraped.text
        assert (await client.get("/metrics", headers=bearer(admin))).status_code == 200
        assert (await client.get("/metrics", headers=bearer(user))).status_code == 403, "a tts key reads no metrics"
        assert (await submit(client, prometheus)).status_code == 403, "a metrics key submits nothing"
        assert (await client.get("/openapi.json", headers=bearer(user))).status_code == 200, "any key reads the docs"
        assert (await client.get("/docs", headers=bearer(prometheus))).status_code == 200
        assert ready(await client.get("/readyz", headers=bearer(admin))) == {"status": "ready", "redis": "ok"}
    async with keyed_api(make_settings, api_docs="public") as (client, _):
        assert (await client.get("/openapi.json")).status_code == 200 and (await client.get("/docs")).status_code == 200
        assert (await client.get("/metrics")).status_code == 401, "publishing the docs publishes no metrics"
    async with keyed_api(make_settings, api_docs="off") as (client, _):
        key = await new_key(redis, "admin")
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await client.get(path, headers=bearer(key))).status_code == 404
    async with api_client(make_settings()) as (client, _):  # keys optional (loopback): everything as before
        assert (await client.get("/metrics")).status_code == 200 and (await client.get("/openapi.json")).status_code == 200
        assert {"workers", "queue_depth"} <= set((await client.get("/readyz")).json())
