"""The reliable queue against a real redis-server: claims, leases, sweeps, retries, dead letters.

Time is the test's: the queue reads an injected clock (:class:`tests.conftest.FakeClock`), so a
lease lapses or a backoff ends exactly when the test advances it — no sleeps, no races.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, claimed, params, queue_config, settings, task_id
from ttsq.domain.jobs import Status
from ttsq.store.connection import (
    EvictionRisk,
    UnsafeRedisError,
    check_eviction_policy,
    create_redis,
    enforce_eviction_policy,
)
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.queue import JobQueue, QueueFullError
from ttsq.store.replies import Cancelled, Completed, Enqueued, Failed, Started

SWEEP = 5.0


async def test_enqueue_is_idempotent(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    job_id = task_id()
    first = await queue.enqueue(job_id, params("one"), single_flight=True)
    again = await queue.enqueue(job_id, params("two"), single_flight=True)
    assert first.outcome is Enqueued.CREATED and again.outcome is Enqueued.EXISTS
    assert again.job.params.text == "one"
    assert await redis.llen(queue.keys.queue) == 1


async def test_claim_complete_stores_result_with_ttl(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(result_ttl_s=600)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    claim = await queue.leases.claim("w1", block_s=0.1)
    assert claim is not None and claim.started is Started.RUN
    assert claim.job.status is Status.RUNNING and claim.job.attempts == 1 and claim.job.worker == "w1"
    assert await redis.lrange(queue.keys.processing, 0, -1) == [job_id.encode()]
    assert await queue.leases.complete(claim.job, b"RIFFaudio", "audio/wav", 1.5, 0.2, cache_key=None) is Completed.DONE
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.DONE and job.duration_s == 1.5
    assert job.result_bytes == len(b"RIFFaudio")
    assert await queue.result(job_id) == b"RIFFaudio"
    assert 0 < await redis.ttl(queue.keys.result(job_id)) <= 600
    assert 0 < await redis.ttl(queue.keys.job(job_id)) <= 600
    assert await redis.llen(queue.keys.processing) == 0
    assert await redis.zscore(queue.keys.leases, job_id) is None


async def test_a_job_whose_lists_are_empty_loads_after_a_script_rewrote_it(make_queue: Any, redis: Redis) -> None:
    """Lua's cjson writes an empty list back as ``{}``: the claimed, cancelled and stored job still loads."""
    queue: JobQueue = make_queue()
    job_id = task_id()
    await queue.enqueue(job_id, params().model_copy(update={"segments": [], "speaker_blend": []}), single_flight=False)
    claim = await queue.leases.claim("w1", block_s=0.1)
    assert claim is not None and claim.job.params.segments == [] and claim.job.params.speaker_blend == []
    assert b'"segments":{}' in (await redis.get(queue.keys.job(job_id)) or b""), "the script no longer rewrites it"
    assert await queue.leases.complete(claim.job, b"RIFFaudio", "audio/wav", 1.5, 0.2, cache_key=None) is Completed.DONE
    job = await queue.get(job_id)
    assert job is not None and job.params.segments == []


async def test_claim_on_empty_queue_returns_none(make_queue: Any) -> None:
    assert await make_queue().leases.claim("w1", block_s=0.05) is None


async def test_queue_is_fifo_and_reports_positions(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    ids = [task_id() for _ in range(3)]
    for job_id in ids:
        await queue.enqueue(job_id, params(), single_flight=False)
    assert [await queue.position(i) for i in ids] == [0, 1, 2]
    claim = await queue.leases.claim("w", block_s=0.1)
    assert claim is not None and claim.job.id == ids[0]
    assert await queue.position(ids[0]) is None
    assert await queue.position(ids[2]) == 1


async def test_two_concurrent_claimers_never_share_a_job(redis_server: Any, make_queue: Any) -> None:
    producer: JobQueue = make_queue()
    ids = {task_id() for _ in range(60)}
    for job_id in ids:
        await producer.enqueue(job_id, params(), single_flight=False)

    async def drain(worker: str) -> list[str]:
        client = create_redis(settings(redis_url=redis_server.url, redis_max_connections=4).redis_config())
        queue = JobQueue(client, queue_config())
        got: list[str] = []
        try:
            while (claim := await queue.leases.claim(worker, block_s=0.05)) is not None:
                got.append(claim.job.id)
                await asyncio.sleep(0)
        finally:
            await client.aclose()
        return got

    first, second = await asyncio.gather(drain("a"), drain("b"))
    assert not set(first) & set(second)
    assert set(first) | set(second) == ids
    assert len(first) + len(second) == len(ids)


async def test_a_lapsed_lease_is_swept_back_to_the_front_of_the_queue(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=30)
    job_id, behind = task_id(), task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await queue.enqueue(behind, params(), single_flight=False)
    assert await queue.leases.claim("dead-worker", block_s=0.1) is not None
    clock.advance(29.9)
    assert (await queue.leases.sweep(SWEEP, "w")).requeued == 0, "a live lease must not be swept"
    clock.advance(0.2)
    await redis.delete(queue.keys.sweep_lock)
    report = await queue.leases.sweep(SWEEP, "w")
    assert report.swept and report.requeued == 1
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED and job.worker is None
    assert job.error is not None and "lease expired" in job.error
    assert await redis.llen(queue.keys.processing) == 0
    assert await queue.position(job_id) == 0, "a requeued job goes to the front"
    again = await queue.leases.claim("live-worker", block_s=0.1)
    assert again is not None and again.job.id == job_id and again.job.attempts == 2


async def test_renewal_keeps_the_lease_and_reports_leases_not_held(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=30)
    mine, other = task_id(), task_id()
    await queue.enqueue(mine, params(), single_flight=False)
    await queue.enqueue(other, params(), single_flight=False)
    token = (await claimed(queue, "w")).token
    await claimed(queue, "someone-else")
    requeued = []
    for _ in range(4):
        clock.advance(20)
        renewed = await queue.leases.renew_leases({mine: token, other: token})
        assert renewed.lost == {other}, "w never held the other job's lease: its token is not that claim's"
        await redis.delete(queue.keys.sweep_lock)
        requeued.append((await queue.leases.sweep(SWEEP, "w")).requeued)
    assert requeued == [0, 1, 0, 0], "the unrenewed lease lapses at t=30 and is swept at t=40; the renewed one never"
    assert await redis.zscore(queue.keys.leases, mine) == clock.now + 30


async def test_only_one_worker_sweeps_per_interval(make_queue: Any, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=30)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await queue.leases.claim("gone", block_s=0.1)
    clock.advance(31)
    first = await queue.leases.sweep(60, "a")
    second = await queue.leases.sweep(60, "b")
    assert first.swept and first.requeued == 1
    assert not second.swept, "the lock lasts one interval: the second worker skips this round"


async def test_claimed_but_unstarted_job_is_swept_only_after_grace(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    """An older release's worker that died between its BLMOVE and its start script left a lease-less queued id."""
    queue: JobQueue = make_queue(lease_s=10)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    # As that release's BLMOVE did, now out of the job's tenant queue (and the tally, and the ring it empties):
    await redis.lmove(queue.keys.tenant_queue("interactive", "anonymous"), queue.keys.processing, "RIGHT", "LEFT")
    await redis.rpop(queue.keys.queue)
    await redis.delete(queue.keys.ring("interactive"))
    sightings = []
    for step in (0, 1, 9):
        clock.advance(step)
        await redis.delete(queue.keys.sweep_lock)
        sightings.append((await queue.leases.sweep(SWEEP, "w")).orphans)
    assert sightings == [0, 0, 1], "first sighting, within grace, then past grace"
    assert await queue.position(job_id) == 0


async def test_attempts_cap_dead_letters_with_reason(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=10, max_attempts=2)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    for _ in range(2):
        claim = await queue.leases.claim("crashy", block_s=0.1)
        assert claim is not None and claim.runnable
        clock.advance(11)
        await redis.delete(queue.keys.sweep_lock)
        assert (await queue.leases.sweep(SWEEP, "w")).requeued == 1
    final = await queue.leases.claim("crashy", block_s=0.1)
    assert final is not None and final.started is Started.DEAD
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED
    assert job.error is not None and "gave up after 2 attempts" in job.error and "lease expired" in job.error
    assert [d.id for d in await DeadLetters(queue).newest()] == [job_id]


async def test_retryable_failure_waits_out_an_exponential_backoff(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(max_attempts=3, retry_base_s=2.0)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    failed_at = clock.now
    assert await queue.leases.fail(held.job, "inference failed: boom", retryable=True, cache_key=None) is Failed.RETRY
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED and job.error == "inference failed: boom"
    assert job.not_before == failed_at + 2.0, "after attempt 1: 2 ** 1 seconds"
    assert await queue.depth() == 0
    clock.advance(1.9)
    assert (await queue.leases.sweep(SWEEP, "w")).promoted == 0, "released before its backoff was over"
    clock.advance(0.1)
    await redis.delete(queue.keys.sweep_lock)
    assert (await queue.leases.sweep(SWEEP, "w")).promoted == 1
    assert await queue.depth() == 1
    claim = await queue.leases.claim("w", block_s=0.1)
    assert claim is not None and claim.job.attempts == 2
    assert await queue.leases.fail(claim.job, "boom again", retryable=True, cache_key=None) is Failed.RETRY
    job = await queue.get(job_id)
    assert job is not None and job.not_before == clock.now + 4.0, "after attempt 2: 2 ** 2 seconds"


async def test_final_failure_after_last_attempt(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_attempts=1)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    assert await queue.leases.fail(held.job, "inference failed: boom", retryable=True, cache_key=None) is Failed.FAILED
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.error == "inference failed: boom"
    assert [d.id for d in await DeadLetters(queue).newest()] == [job_id]


async def test_permanent_failure_is_not_retried(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_attempts=3)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    assert await queue.leases.fail(held.job, "invalid job: bad voice", retryable=False, cache_key=None) is Failed.FAILED
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.attempts == 1


async def test_failing_a_finished_job_changes_nothing(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    await queue.leases.complete(held.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)
    assert await queue.leases.fail(held.job, "late", retryable=True, cache_key=None) is Failed.GONE
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.DONE


async def test_queued_and_running_jobs_never_expire(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(result_ttl_s=10)
    waiting, running = task_id(), task_id()
    await queue.enqueue(running, params(), single_flight=False)
    await queue.enqueue(waiting, params(), single_flight=False)
    held = await claimed(queue)
    assert await redis.ttl(queue.keys.job(waiting)) == -1
    assert await redis.ttl(queue.keys.job(running)) == -1
    await queue.leases.fail(held.job, "boom", retryable=True, cache_key=None)
    assert await redis.ttl(queue.keys.job(running)) == -1, "a job waiting for its retry must not expire"


async def test_oversized_result_fails_the_job(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_result_bytes=1024)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    assert await queue.leases.complete(held.job, b"x" * 2048, "audio/wav", 1.0, 0.1, cache_key=None) is Failed.FAILED
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.FAILED and job.error is not None and "limit" in job.error


async def test_full_queue_refuses_new_jobs(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_queue_depth=2)
    await queue.enqueue(task_id(), params(), single_flight=False)
    await queue.enqueue(task_id(), params(), single_flight=False)
    with pytest.raises(QueueFullError):
        await queue.enqueue(task_id(), params(), single_flight=False)


async def test_single_flight_joins_an_identical_job_only_when_asked(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    keyed = params(cache_key="k" * 64)
    first = await queue.enqueue(task_id(), keyed, single_flight=True)
    joined = await queue.enqueue(task_id(), keyed, single_flight=True)
    separate = await queue.enqueue(task_id(), keyed, single_flight=False)
    assert joined.outcome is Enqueued.JOINED and joined.job.id == first.job.id
    assert separate.outcome is Enqueued.CREATED and separate.job.id != first.job.id


async def test_a_sole_cancel_ends_only_a_job_nobody_joined(make_queue: Any) -> None:
    """A request that queued a job and went away (``sole``) cancels it only while no submit joined it — its own
    submitter's second submit included, which adds no holder — checked in the cancel script, waiting or running."""
    queue: JobQueue = make_queue()
    keyed = params(cache_key="k" * 64)
    alone = await queue.enqueue(task_id(), params(), single_flight=True, owner="addr:a", max_per_owner=10)
    assert await queue.cancel(alone.job, None, "addr:a", sole=True) is Cancelled.CANCELLED
    first = await queue.enqueue(task_id(), keyed, single_flight=True, owner="addr:a", max_per_owner=10)
    again = await queue.enqueue(task_id(), keyed, single_flight=True, owner="addr:a", max_per_owner=10)
    assert again.outcome is Enqueued.JOINED and again.job.id == first.job.id
    assert await queue.cancel(first.job, None, "addr:a", sole=True) is Cancelled.KEPT
    claim = await claimed(queue)
    assert claim.job.id == first.job.id and claim.job.joins == 1
    assert await queue.cancel(claim.job, None, "addr:a", sole=True) is Cancelled.KEPT, "running, and still joined"
    job = await queue.get(first.job.id)
    assert job is not None and job.status is Status.RUNNING and not job.cancel_requested
    assert await queue.cancel(claim.job, None, "addr:a") is Cancelled.CANCELLING, "an explicit cancel is not a sole one"


async def test_a_stale_owner_is_refused_and_cannot_touch_the_new_owners_lease(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    """The late worker: it stalled past its lease, the sweep requeued its job and another worker claimed it.
    Everything the stale owner sends with its old fencing token is refused; the new owner's lease is untouched."""
    queue: JobQueue = make_queue(lease_s=10)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    slow = await claimed(queue, "slow")
    stale = slow.token
    clock.advance(11)
    assert (await queue.leases.sweep(SWEEP, "w")).requeued == 1
    assert await queue.leases.complete(slow.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.STALE, (
        "a requeued job is not the stale owner's to complete"
    )
    fresh = await claimed(queue, "other")
    assert fresh.job.id == job_id and fresh.token > stale, "every claim takes a larger token"
    assert (await queue.leases.renew_leases({job_id: stale})).lost == {job_id}
    assert await queue.leases.complete(slow.job, b"old", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.STALE
    assert await queue.leases.fail(slow.job, "late", retryable=True, cache_key=None) is Failed.STALE
    deadline = clock.now + 10
    assert await redis.zscore(queue.keys.leases, job_id) == deadline, "the new owner's lease is untouched"
    assert await redis.lrange(queue.keys.processing, 0, -1) == [job_id.encode()]
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.RUNNING and job.worker == "other" and job.claim == fresh.token
    assert (await queue.leases.renew_leases({job_id: fresh.token})).lost == set()
    assert await queue.leases.complete(fresh.job, b"new", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.DONE
    assert await queue.result(job_id) == b"new"


async def test_every_key_is_hash_tagged(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(max_attempts=1)
    a, b = task_id(), task_id()
    await queue.enqueue(a, params(cache_key="k" * 64), single_flight=True)
    await queue.enqueue(b, params(), single_flight=False)
    first, second = await claimed(queue), await claimed(queue)
    await queue.leases.sweep(SWEEP, "w")
    await queue.leases.complete(first.job, b"audio", "audio/wav", 1.0, 0.1, cache_key="k" * 64)
    await queue.leases.fail(second.job, "boom", retryable=False, cache_key=None)
    keys = [k.decode() if isinstance(k, bytes) else k for k in await redis.keys("*")]
    assert keys and all(k.startswith("{ttsq}:") for k in keys), keys


async def test_eviction_policy_check(redis: Redis) -> None:
    await redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        check = await check_eviction_policy(redis)
        assert check.risk is EvictionRisk.EVICTS and check.message is not None and "allkeys-lru" in check.message
        enforce_eviction_policy(check, require_noeviction=False)
        with pytest.raises(UnsafeRedisError, match="EVICT"):
            enforce_eviction_policy(check, require_noeviction=True)
    finally:
        await redis.config_set("maxmemory-policy", "noeviction")
    check = await check_eviction_policy(redis)
    assert check.risk is EvictionRisk.NONE and check.message is None
    enforce_eviction_policy(check, require_noeviction=True)


async def test_unreachable_redis_is_reported_not_raised(redis_server: Any) -> None:
    from tests.support.redis_server import free_port

    config = settings(
        redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_socket_timeout_s=1, redis_connect_timeout_s=0.5, block_s=0.5
    ).redis_config()
    client = create_redis(config)
    try:
        check = await check_eviction_policy(client)
    finally:
        await client.aclose()
    assert check.risk is EvictionRisk.UNREACHABLE and check.message is not None
    enforce_eviction_policy(check, require_noeviction=True)
