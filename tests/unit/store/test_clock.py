"""One clock: leases, the sweep and the token bucket go by Redis's time, never by a host's.

Each test runs the production clock (no pinned time: the scripts read Redis's ``TIME``) and gives one
side a host clock that is off — ``time.time`` shifted for its calls only, as on a drifted machine —
then checks that nothing it decides moved. The same claims against real processes whose whole clock
is off are in ``tests/e2e/test_clock_skew.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from redis.asyncio import Redis

from tests.conftest import claimed, params, queue_config, task_id
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateLimiter


@contextmanager
def host_clock_off(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Iterator[None]:
    """Within the block, this process's wall clock runs ``seconds`` off (what FAULT_CLOCK_SKEW_S does to a whole process)."""
    real = time.time
    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: real() + seconds)
        yield


async def redis_now(redis: Redis) -> float:
    seconds, micros = await redis.time()
    return float(seconds) + micros / 1e6


async def test_two_replicas_two_seconds_apart_share_one_bucket(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The skewed-clock case as found: 1/s, burst 5, 40 requests alternating between a replica and one whose clock runs 2 s
    ahead. By the replicas' clocks each switch refilled two tokens and all 40 passed; by Redis's, the bucket
    holds what a bucket may: the burst, plus one token per second that really passed."""
    keys = Keys(queue_config().namespace)
    on_time, ahead = RateLimiter(redis, keys, 1.0, 5), RateLimiter(redis, keys, 1.0, 5)

    async def take(limiter: RateLimiter, off_s: float) -> bool:
        with host_clock_off(monkeypatch, off_s):
            return (await limiter.take("client")).allowed

    began = await redis_now(redis)
    allowed = [await take(on_time if n % 2 == 0 else ahead, 0.0 if n % 2 == 0 else 2.0) for n in range(40)]
    elapsed = await redis_now(redis) - began
    assert allowed[:5] == [True] * 5
    assert sum(allowed) <= 5 + int(elapsed * 1.0) + 1, f"{sum(allowed)} of 40 passed in {elapsed:.2f}s"


async def test_a_host_clock_far_ahead_never_judges_a_live_lease_lapsed(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    holder, sweeper = JobQueue(redis, queue_config(lease_s=30)), JobQueue(redis, queue_config(lease_s=30))
    job_id = task_id()
    await holder.enqueue(job_id, params(), single_flight=False)
    before = await redis_now(redis)
    claim = await claimed(holder)
    after = await redis_now(redis)
    deadline = await redis.zscore(holder.keys.leases, job_id)
    assert deadline is not None and before + 30 - 0.001 <= deadline <= after + 30 + 0.001, "the lease runs on Redis's clock"
    with host_clock_off(monkeypatch, 600.0):
        report = await sweeper.leases.sweep(5.0, "ahead")
    assert report.swept and report.requeued == 0, "ten minutes ahead on the sweeper's host change nothing"
    with host_clock_off(monkeypatch, -600.0):
        renewed = await holder.leases.renew_leases({job_id: claim.token})
    assert renewed.lost == set()
    moved = await redis.zscore(holder.keys.leases, job_id)
    assert moved is not None and moved >= deadline, "a renewal from a host running behind still moves the lease forward"


async def test_a_retry_backoff_is_timed_by_redis(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = JobQueue(redis, queue_config(retry_base_s=2.0))
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    claim = await claimed(queue)
    before = await redis_now(redis)
    with host_clock_off(monkeypatch, -3600.0):
        await queue.leases.fail(claim.job, "boom", retryable=True, cache_key=None)
    after = await redis_now(redis)
    job = await queue.get(job_id)
    assert job is not None and job.not_before is not None
    assert before + 2.0 - 0.001 <= job.not_before <= after + 2.0 + 0.001
    with host_clock_off(monkeypatch, 3600.0):
        assert (await queue.leases.sweep(5.0, "ahead")).promoted == 0, "an hour ahead on the sweeper's host releases nothing early"


async def test_every_timestamp_of_a_job_is_redis_time(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = JobQueue(redis, queue_config())
    job_id = task_id()
    before = await redis_now(redis)
    with host_clock_off(monkeypatch, -86400.0):
        await queue.enqueue(job_id, params(), single_flight=False)
        claim = await claimed(queue)
        await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None)
    after = await redis_now(redis)
    job = await queue.get(job_id)
    assert job is not None and job.started_at is not None and job.finished_at is not None
    assert all(before - 0.001 <= at <= after + 0.001 for at in (job.created_at, job.started_at, job.finished_at))


