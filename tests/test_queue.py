"""The reliable queue against a real redis-server: claims, leases, reaping, retries, dead letters."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from ttsq.jobs import Status, TTSParams, new_task_id
from ttsq.queue import JobQueue, QueueConfig, QueueFullError, check_eviction_policy
from ttsq.redis_conn import RedisConfig, create_redis


def params(text: str = "hello") -> TTSParams:
    return TTSParams(text=text, speaker_seed=7, seed=7)


async def test_enqueue_is_idempotent(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    job_id = new_task_id()
    first = await queue.enqueue(job_id, params("one"))
    again = await queue.enqueue(job_id, params("two"))
    assert first.created and not again.created
    assert again.job.params.text == "one"
    assert await redis.llen(queue.keys.queue) == 1


async def test_claim_complete_stores_result_with_ttl(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(result_ttl_s=600)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    claim = await queue.claim("w1", block_s=0.1)
    assert claim is not None and claim.runnable
    assert claim.job.status is Status.RUNNING and claim.job.attempts == 1 and claim.job.worker == "w1"
    assert await redis.lrange(queue.keys.processing, 0, -1) == [job_id.encode()]
    assert await queue.complete(job_id, b"RIFFaudio", "audio/wav", 1.5, 0.2)
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.DONE and job.duration_s == 1.5
    assert job.result_bytes == len(b"RIFFaudio")
    assert await queue.result(job_id) == b"RIFFaudio"
    assert 0 < await redis.ttl(queue.keys.result(job_id)) <= 600
    assert 0 < await redis.ttl(queue.keys.job(job_id)) <= 600
    assert await redis.llen(queue.keys.processing) == 0
    assert not await redis.exists(queue.keys.lease(job_id))


async def test_claim_on_empty_queue_returns_none(make_queue: Any) -> None:
    assert await make_queue().claim("w1", block_s=0.05) is None


async def test_queue_is_fifo_and_reports_positions(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    ids = [new_task_id() for _ in range(3)]
    for job_id in ids:
        await queue.enqueue(job_id, params())
    assert [await queue.position(i) for i in ids] == [0, 1, 2]
    claim = await queue.claim("w", block_s=0.1)
    assert claim is not None and claim.job.id == ids[0]
    assert await queue.position(ids[0]) is None
    assert await queue.position(ids[2]) == 1


async def test_two_concurrent_claimers_never_share_a_job(redis_server: Any, make_queue: Any) -> None:
    producer: JobQueue = make_queue()
    ids = {new_task_id() for _ in range(60)}
    for job_id in ids:
        await producer.enqueue(job_id, params())

    async def drain(worker: str) -> list[str]:
        client = create_redis(RedisConfig(url=redis_server.url))
        queue = JobQueue(client, QueueConfig())
        got: list[str] = []
        try:
            while (claim := await queue.claim(worker, block_s=0.05)) is not None:
                got.append(claim.job.id)
                await asyncio.sleep(0)
        finally:
            await client.aclose()
        return got

    first, second = await asyncio.gather(drain("a"), drain("b"))
    assert not set(first) & set(second)
    assert set(first) | set(second) == ids
    assert len(first) + len(second) == len(ids)


async def test_expired_lease_is_reaped_and_requeued(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(lease_s=0.2)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    assert await queue.claim("dead-worker", block_s=0.1) is not None
    assert await queue.reap() == 0, "a live lease must not be reaped"
    await asyncio.sleep(0.3)
    assert await queue.reap() == 1
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED and job.worker is None
    assert job.error is not None and "lease expired" in job.error
    assert await redis.llen(queue.keys.processing) == 0
    again = await queue.claim("live-worker", block_s=0.1)
    assert again is not None and again.job.id == job_id and again.job.attempts == 2


async def test_lease_renewal_keeps_the_job(make_queue: Any) -> None:
    queue: JobQueue = make_queue(lease_s=0.3)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("w", block_s=0.1)
    for _ in range(4):
        await asyncio.sleep(0.15)
        assert await queue.renew_lease(job_id, "w")
        assert await queue.reap() == 0
    assert not await queue.renew_lease(job_id, "someone-else")


async def test_claimed_but_unstarted_job_is_reaped_only_after_grace(make_queue: Any, redis: Redis) -> None:
    """A worker that died between BLMOVE and its start script leaves a lease-less queued id."""
    queue: JobQueue = make_queue(lease_s=5)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await redis.lmove(queue.keys.queue, queue.keys.processing, "RIGHT", "LEFT")
    now = time.time()
    assert await queue.reap(now=now) == 0
    assert await queue.reap(now=now + 1) == 0
    assert await queue.reap(now=now + 6) == 1
    assert await queue.position(job_id) == 0


async def test_attempts_cap_dead_letters_with_reason(make_queue: Any) -> None:
    queue: JobQueue = make_queue(lease_s=0.1, max_attempts=2)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    for _ in range(2):
        claim = await queue.claim("crashy", block_s=0.1)
        assert claim is not None and claim.runnable
        await asyncio.sleep(0.15)
        assert await queue.reap() == 1
    final = await queue.claim("crashy", block_s=0.1)
    assert final is not None and not final.runnable
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED
    assert job.error is not None and "gave up after 2 attempts" in job.error and "lease expired" in job.error
    dead = await queue.dead_letters()
    assert [d.id for d in dead] == [job_id]


async def test_transient_failure_retries_with_exponential_backoff(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(max_attempts=3, retry_base_s=2.0)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("w", block_s=0.1)
    before = time.time()
    assert await queue.fail(job_id, "inference failed: boom", retryable=True) == "retry"
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED and job.error == "inference failed: boom"
    assert job.not_before is not None and 1.9 <= job.not_before - before <= 2.5
    assert await queue.depth() == 0
    await queue.reap(now=before + 1)
    assert await queue.depth() == 0, "released before its backoff was over"
    await queue.reap(now=before + 3)
    assert await queue.depth() == 1
    claim = await queue.claim("w", block_s=0.1)
    assert claim is not None and claim.job.attempts == 2
    before = time.time()
    assert await queue.fail(job_id, "boom again", retryable=True) == "retry"
    job = await queue.get(job_id)
    assert job is not None and job.not_before is not None and 3.9 <= job.not_before - before <= 4.5


async def test_final_failure_after_last_attempt(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_attempts=1)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("w", block_s=0.1)
    assert await queue.fail(job_id, "inference failed: boom", retryable=True) == "failed"
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.error == "inference failed: boom"
    assert [d.id for d in await queue.dead_letters()] == [job_id]


async def test_permanent_failure_is_not_retried(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_attempts=3)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("w", block_s=0.1)
    assert await queue.fail(job_id, "invalid job: bad voice", retryable=False) == "failed"
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.attempts == 1


async def test_queued_and_running_jobs_never_expire(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(result_ttl_s=10)
    waiting, running = new_task_id(), new_task_id()
    await queue.enqueue(running, params())
    await queue.enqueue(waiting, params())
    await queue.claim("w", block_s=0.1)
    assert await redis.ttl(queue.keys.job(waiting)) == -1
    assert await redis.ttl(queue.keys.job(running)) == -1
    await queue.fail(running, "boom", retryable=True)
    assert await redis.ttl(queue.keys.job(running)) == -1, "a job waiting for its retry must not expire"


async def test_oversized_result_fails_the_job(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_result_bytes=1024)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("w", block_s=0.1)
    assert not await queue.complete(job_id, b"x" * 2048, "audio/wav", 1.0, 0.1)
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.error is not None and "limit" in job.error


async def test_full_queue_refuses_new_jobs(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_queue_depth=2)
    await queue.enqueue(new_task_id(), params())
    await queue.enqueue(new_task_id(), params())
    with pytest.raises(QueueFullError):
        await queue.enqueue(new_task_id(), params())


async def test_complete_after_reaping_does_not_run_the_job_twice(make_queue: Any) -> None:
    """A slow (not dead) worker finishes after its job was requeued: the requeued copy is skipped."""
    queue: JobQueue = make_queue(lease_s=0.1)
    job_id = new_task_id()
    await queue.enqueue(job_id, params())
    await queue.claim("slow", block_s=0.1)
    await asyncio.sleep(0.15)
    assert await queue.reap() == 1
    assert await queue.complete(job_id, b"audio", "audio/wav", 1.0, 0.1)
    assert await queue.claim("other", block_s=0.1) is None


async def test_every_key_is_hash_tagged(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(lease_s=0.1, max_attempts=1)
    a, b = new_task_id(), new_task_id()
    await queue.enqueue(a, params())
    await queue.enqueue(b, params())
    await queue.claim("w", block_s=0.1)
    await queue.complete(a, b"audio", "audio/wav", 1.0, 0.1)
    await queue.claim("w", block_s=0.1)
    await queue.fail(b, "boom", retryable=False)
    await queue.write_heartbeat("w", {"ok": True})
    keys = [k.decode() if isinstance(k, bytes) else k for k in await redis.keys("*")]
    assert keys and all(k.startswith("{ttsq}:") for k in keys), keys


async def test_heartbeats_count_live_workers(make_queue: Any) -> None:
    queue: JobQueue = make_queue(heartbeat_ttl_s=5)
    assert await queue.live_worker_count() == 0
    await queue.write_heartbeat("w1", {"worker_id": "w1"})
    await queue.write_heartbeat("w2", {"worker_id": "w2"})
    assert await queue.live_worker_count() == 2
    assert {r["worker_id"] for r in await queue.worker_records()} == {"w1", "w2"}
    await queue.remove_heartbeat("w1")
    assert await queue.live_worker_count() == 1


async def test_eviction_policy_warning(redis: Redis) -> None:
    await redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        warning = await check_eviction_policy(redis)
        assert warning is not None and "allkeys-lru" in warning and "EVICT" in warning
    finally:
        await redis.config_set("maxmemory-policy", "noeviction")
    assert await check_eviction_policy(redis) is None
