"""Dead letters people can act on: list, show, requeue under the same id, purge — through the queue,
the operator command (``python -m ttsq dead-letters``) and the admin routes, on a real redis-server."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from redis.asyncio import Redis

from tests.conftest import FakeClock, api_client, params, task_id
from tests.support.redis_server import RedisServer
from tests.support.service import ROOT
from ttsq.domain.jobs import Status
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Requeued

SWEEP = 5.0


async def dead_letter(queue: JobQueue, text: str, reason: str = "the engine refused it", owner: str | None = None) -> str:
    """Queue a job and fail it for good (a permanent error)."""
    job_id = task_id()
    await queue.enqueue(job_id, params(text), single_flight=False, owner=owner, max_per_owner=10)
    claim = await queue.leases.claim("w", block_s=0.1)
    assert claim is not None and claim.job.id == job_id
    await queue.leases.fail(claim.job, reason, retryable=False, cache_key=None)
    return job_id


async def test_a_requeued_dead_letter_keeps_its_id_and_runs_again(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(max_attempts=2)
    job_id = await dead_letter(queue, "first", owner="key:abc")
    other = await dead_letter(queue, "second")
    assert [job.id for job in await DeadLetters(queue).newest()] == [other, job_id]
    assert await redis.get(queue.keys.owner_jobs("key:abc")) is None, "failing released the owner's place"

    shown = await DeadLetters(queue).get(job_id)
    assert shown is not None and shown.error == "the engine refused it" and shown.attempts == 1
    await redis.delete(queue.keys.job(job_id))  # its record expired (RESULT_TTL_S) while it sat there

    assert await DeadLetters(queue).requeue(job_id) is Requeued.REQUEUED
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED and job.attempts == 0 and job.error is None
    assert job.isolate and job.requeues == 1, "it runs alone, and its next webhook is a new event"
    assert await redis.ttl(queue.keys.job(job_id)) == -1, "a queued job never expires"
    assert await redis.get(queue.keys.owner_jobs("key:abc")) == b"1", "it counts against its owner again"
    assert [job.id for job in await DeadLetters(queue).newest()] == [other]
    assert await DeadLetters(queue).requeue(job_id) is Requeued.MISSING, "requeueing twice changes nothing"

    claim = await queue.leases.claim("w2", block_s=0.1)
    assert claim is not None and claim.job.id == job_id and claim.job.attempts == 1
    assert str(await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None)) == "done"
    assert (await queue.get(job_id)).status is Status.DONE  # type: ignore[union-attr]

    assert await DeadLetters(queue).purge(other) == 1 and await DeadLetters(queue).newest() == []
    assert (await queue.get(other)).status is Status.FAILED, "purging drops the letter, not the task's answer"  # type: ignore[union-attr]


async def test_a_dead_letter_whose_task_is_active_again_is_left_alone(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    job_id = await dead_letter(queue, "racy")
    assert await DeadLetters(queue).requeue(job_id) is Requeued.REQUEUED
    # A stale copy of the letter (say, two operators at once) must not reset a job that runs again.
    running = await queue.get(job_id)
    assert running is not None and await DeadLetters(queue).get(job_id) is None
    await redis.lpush(queue.keys.dead, running.model_copy(update={"status": Status.FAILED}).model_dump_json())
    assert await DeadLetters(queue).requeue(job_id) is Requeued.ACTIVE
    assert (await queue.get(job_id)) == running, "the queued job is untouched"


def ttsq(redis_server: RedisServer, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``python -m ttsq ARGS`` as an operator runs it, on this Redis, with ``settings`` in its environment."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("REDIS_", "WEBHOOK_", "PUBLIC_URL"))}
    env.update(settings, REDIS_URL=redis_server.url)
    return subprocess.run(
        [sys.executable, "-m", "ttsq", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def test_the_dead_letters_command(make_queue: Any, redis: Redis, redis_server: RedisServer) -> None:
    queue: JobQueue = make_queue()
    first = await dead_letter(queue, "one", reason="gave up after 3 attempts; last error: CUDA error")
    second = await dead_letter(queue, "two")

    listed = ttsq(redis_server, "dead-letters", "list")
    assert listed.returncode == 0, listed.stderr
    assert first in listed.stdout and second in listed.stdout and "CUDA error" in listed.stdout
    shown = ttsq(redis_server, "dead-letters", "show", first)
    assert shown.returncode == 0 and '"text": "one"' in shown.stdout
    assert ttsq(redis_server, "dead-letters", "show", "nope").returncode == 1

    requeued = ttsq(redis_server, "dead-letters", "requeue", first, "nope")
    assert requeued.returncode == 1 and f"requeued {first}" in requeued.stdout and "no such dead letter" in requeued.stderr
    assert (await queue.get(first)).status is Status.QUEUED  # type: ignore[union-attr]

    assert ttsq(redis_server, "dead-letters", "purge").returncode == 2, "purge names what it drops, or --all"
    purged = ttsq(redis_server, "dead-letters", "purge", "--all")
    assert purged.returncode == 0 and "purged 1" in purged.stdout
    assert await DeadLetters(queue).newest() == []


async def test_the_admin_routes_need_the_admin_scope(make_settings: Any, redis: Redis, make_queue: Any) -> None:
    from tests.integration.api.test_security import bearer, new_key

    queue: JobQueue = make_queue()
    job_id = await dead_letter(queue, "over http")
    async with api_client(make_settings(auth="on")) as (client, _):
        user, admin = await new_key(redis, "tts"), await new_key(redis, "admin")
        assert (await client.get("/v1/admin/dead-letters")).status_code == 401
        assert (await client.get("/v1/admin/dead-letters", headers=bearer(user))).status_code == 403
        listing = (await client.get("/v1/admin/dead-letters", headers=bearer(admin))).json()
        assert listing["total"] == 1 and listing["dead_letters"][0]["task_id"] == job_id
        assert listing["dead_letters"][0]["error"] == "the engine refused it"
        one = await client.get(f"/v1/admin/dead-letters/{job_id}", headers=bearer(admin))
        assert one.status_code == 200 and one.json()["text"] == "over http"
        requeued = await client.post(f"/v1/admin/dead-letters/{job_id}/requeue", headers=bearer(admin))
        assert requeued.status_code == 202 and requeued.json() == {"task_id": job_id, "status": "queued", "queue_position": 0}
        assert (await client.post(f"/v1/admin/dead-letters/{job_id}/requeue", headers=bearer(admin))).status_code == 404
        assert (await client.delete(f"/v1/admin/dead-letters/{job_id}", headers=bearer(admin))).status_code == 404
        claim = await queue.leases.claim("w", block_s=0.1)  # the requeued job, refused again: a dead letter once more
        assert claim is not None and claim.job.id == job_id
        await queue.leases.fail(claim.job, "refused again", retryable=False, cache_key=None)
        assert (await client.get("/v1/admin/dead-letters", headers=bearer(admin))).json()["total"] == 1
        assert (await client.delete(f"/v1/admin/dead-letters/{job_id}", headers=bearer(admin))).status_code == 204
        assert (await client.get("/v1/admin/dead-letters", headers=bearer(admin))).json()["total"] == 0
