"""A claim is safe to repeat: a lost answer never strands a job (as a timed-out BLMOVE re-sent by redis-py was).

The queue runs on a real redis-server, behind a proxy that loses chosen replies on their way back
(:mod:`tests.support.redis_proxy`): Redis does the work, the client never hears of it and times out, and
redis-py sends the same command again on a new connection (or, with its retries spent, raises).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.conftest import params, queue_config, settings, task_id
from tests.support.redis_proxy import redis_proxy
from ttsq.store.connection import create_redis
from ttsq.store.queue import JobQueue

WORKER = "claim-tester"


async def proxied_queue(url: str, retries: int, shards: int = 1) -> JobQueue:
    """A queue whose client gives up on a reply after half a second, then retries ``retries`` times. Its claim
    script is loaded already, so the command whose answer a test loses is the claim itself, not a first EVALSHA
    answered NOSCRIPT (a claim on an empty queue never runs the script: it peeks and stops)."""
    config = settings(redis_url=url, redis_socket_timeout_s=0.5, redis_retries=retries, block_s=0.3)
    queue = JobQueue(create_redis(config.redis_config()), queue_config(block_s=0.3, queue_shards=shards))
    assert await queue.leases.claim_more("warm-up", 1) == []
    await queue.redis.script_load(queue.leases._claim_script.script)
    return queue


async def queued(redis: Redis, count: int) -> list[str]:
    queue = JobQueue(redis, queue_config())
    ids = [task_id() for _ in range(count)]
    for job_id in ids:
        await queue.enqueue(job_id, params(job_id), single_flight=False)
    return ids


async def test_a_retried_claim_is_answered_with_the_same_job_not_another(redis_server: Any, redis: Redis) -> None:
    async with redis_proxy(redis_server.port) as proxy:
        queue = await proxied_queue(proxy.url, retries=1)
        ids = await queued(redis, 3)
        try:
            proxy.lose_reply_to(WORKER.encode())
            claim = await queue.leases.claim(WORKER)
        finally:
            await queue.redis.aclose()
    assert len(proxy.lost) == 1, "the first answer was lost, and redis-py sent the claim again"
    assert claim is not None and claim.job.id == ids[0] and claim.job.attempts == 1
    assert await redis.zrange(queue.keys.leases, 0, -1) == [ids[0].encode()], "one job leased, and it is the one in hand"
    assert await JobQueue(redis, queue_config()).waiting() == ids[1:]


async def test_a_claim_that_raised_is_asked_again_and_gets_its_jobs(redis_server: Any, redis: Redis, caplog: Any) -> None:
    """With redis-py's retries spent the claim raises; the worker's next claim repeats the same request and gets
    the jobs the lost one took, instead of leaving them leased to nobody until their leases lapse."""
    caplog.set_level(logging.INFO, logger="ttsq.store.queue")  # whatever level an earlier test left the logger at
    async with redis_proxy(redis_server.port) as proxy:
        queue = await proxied_queue(proxy.url, retries=0)
        ids = await queued(redis, 4)
        try:
            proxy.lose_reply_to(WORKER.encode())
            with pytest.raises(RedisTimeoutError):
                await queue.leases.claim_more(WORKER, 2)
            again = await queue.leases.claim_more(WORKER, 2)
            more = await queue.leases.claim_more(WORKER, 2)
        finally:
            await queue.redis.aclose()
    assert [claim.job.id for claim in again] == ids[:2], "the lost claim's jobs, not two more"
    assert all(claim.job.attempts == 1 for claim in again)
    assert [claim.job.id for claim in more] == ids[2:], "the next claim goes on where it left off"
    assert await redis.zcard(queue.keys.leases) == 4 and await redis.llen(queue.keys.queue) == 0
    assert "none is stranded" in caplog.text


async def test_a_retried_wait_for_work_moves_nothing(redis_server: Any, redis: Redis) -> None:
    """The blocking part of a claim is a BLMOVE of the queue onto itself: its lost answer, re-sent, changes nothing."""
    async with redis_proxy(redis_server.port) as proxy:
        queue = await proxied_queue(proxy.url, retries=1)
        try:
            proxy.lose_reply_to(b"BLMOVE")
            waiting = asyncio.create_task(queue.leases.claim(WORKER, block_s=0.3))
            await asyncio.wait_for(proxy.losing.wait(), 10)  # the claim found nothing and is waiting
            [job_id] = await queued(redis, 1)
            claim = await asyncio.wait_for(waiting, 10)
        finally:
            await queue.redis.aclose()
    assert claim is not None and claim.job.id == job_id and claim.job.attempts == 1
    assert await redis.llen(queue.keys.queue) == 0 and await redis.zcard(queue.keys.leases) == 1


async def test_a_shard_that_fails_after_another_answered_keeps_the_claims_already_taken(
    redis_server: Any, redis: Redis, caplog: Any
) -> None:
    """With two shards, the claim on the second failed (its slot moving in a resharded cluster) and
    ``claim_more`` raised, dropping the job it had just claimed on the first: leased to a worker that never knew,
    it waited out its lease. Now the first shard's claim is kept, and the failed one is asked again next time."""
    async with redis_proxy(redis_server.port) as proxy:
        queue = await proxied_queue(proxy.url, retries=0, shards=2)
        first, second = queue.shards.all  # the warm-up claim took a turn: this round visits shard 0, then shard 1
        on_first, on_second = f"{task_id()}_{first.label}", f"{task_id()}_{second.label}"
        assert first.label == "" and queue.shards.of(on_second) == second
        for job_id in (on_first, on_second):
            await queue.enqueue(job_id, params(job_id), single_flight=False)
        try:
            proxy.lose_reply_to(second.claim_record(WORKER).encode())
            kept = await queue.leases.claim_more(WORKER, 2)
            again = await queue.leases.claim_more(WORKER, 2)
        finally:
            await queue.redis.aclose()
    assert len(proxy.lost) == 1, "the second shard's claim reached Redis and its answer was lost"
    assert [claim.job.id for claim in kept] == [on_first], "the first shard's claim is in hand, not dropped"
    assert [claim.job.id for claim in again] == [on_second], "the lost claim, asked again, names the job it took"
    assert all(claim.job.attempts == 1 for claim in [*kept, *again])
    assert "keeping the 1 job(s) claimed from the others" in caplog.text
