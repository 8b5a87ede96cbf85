"""A job record this release cannot read (another release wrote it, a field of another type) against a real
redis-server: it is claimed, failed and read back like any other job, and never stops whoever reads it.

The record is rewritten straight in Redis, as a newer API writing into the same Redis would leave it: the parameters
hold a seed of a type this release does not take.
"""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from tests.conftest import params, task_id
from ttsq.domain.jobs import Job, Status
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.queue import JobQueue
from ttsq.store.replies import ClaimReply, Failed, Started

OWNER = "key:newer"


async def written_by_a_newer_release(redis: Redis, queue: JobQueue, job_id: str) -> None:
    """Rewrite a stored job as a release with another ``seed`` type would have written it."""
    key = queue.keys.job(job_id)
    record = json.loads(await redis.get(key) or b"{}")
    record["params"]["seed"] = {"draw": 7}
    await redis.set(key, json.dumps(record))


async def test_a_claimed_job_whose_record_does_not_load_is_failed_for_good_with_why(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue(max_attempts=3)
    job_id = task_id()
    await queue.enqueue(job_id, params(cache_key="k-unreadable"), single_flight=True, owner=OWNER, max_per_owner=10)
    await written_by_a_newer_release(redis, queue, job_id)

    claim = await queue.leases.claim("w", block_s=0.1)
    assert claim is not None and claim.started is Started.RUN
    job = claim.job
    assert job.id == job_id and job.claim is not None and job.owner == OWNER and job.params.cache_key == "k-unreadable"
    assert job.unreadable is not None and job.unreadable.startswith("the job record could not be read: params.seed: ")

    assert await queue.leases.fail(job, job.unreadable, retryable=False, cache_key=job.params.cache_key) is Failed.FAILED
    stored = await queue.get(job_id)
    assert stored is not None and stored.status is Status.FAILED and stored.error == job.unreadable
    assert await redis.get(queue.keys.owner_jobs(OWNER)) is None, "its owner's count was not released"
    assert await redis.get(queue.keys.inflight("k-unreadable")) is None, "its single-flight marker was kept"
    entries: Any = await redis.xrange(queue.keys.stream(job_id))
    assert entries[-1][1] == {b"end": b"failed"}, "its stream has no end marker"
    dead = await DeadLetters(queue).newest()
    assert [letter.id for letter in dead] == [job_id] and dead[0].error == job.unreadable


async def test_an_unreadable_record_in_a_batch_leaves_the_others_claimed_and_readable(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    ids = [task_id() for _ in range(3)]
    for job_id in ids:
        await queue.enqueue(job_id, params(), single_flight=False)
    await written_by_a_newer_release(redis, queue, ids[1])

    claims = await queue.leases.claim_more("w", 3)
    assert [claim.job.id for claim in claims] == ids and all(claim.runnable for claim in claims)
    assert [claim.job.unreadable is not None for claim in claims] == [False, True, False]


def test_a_claimed_record_that_is_no_job_at_all_is_left_out_not_raised() -> None:
    """Not even a stand-in loads (no id): raising would take the readable jobs of the claim out of the worker's
    hands too."""
    good = Job(id="good", params=params(), max_attempts=3, created_at=1.0, claim=4).model_dump_json()
    reply = ClaimReply.parse([b"claimed", [b"run", b"[1, 2]"], [b"run", good.encode()], [b"run", b'{"id": 5}']])
    assert [started.job.id for started in reply.started] == ["good"]
    assert len(reply.strays) == 2


async def test_a_dead_letter_that_is_no_job_at_all_hides_no_other(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await written_by_a_newer_release(redis, queue, job_id)
    claim = await queue.leases.claim("w", block_s=0.1)
    assert claim is not None and claim.job.unreadable is not None
    await queue.leases.fail(claim.job, claim.job.unreadable, retryable=False, cache_key=None)
    await redis.lpush(queue.keys.dead, b'{"attempts": 1}', b"not json")
    letters = DeadLetters(queue)
    assert [letter.id for letter in await letters.newest()] == [job_id]
    found = await letters.get(job_id)
    assert found is not None and found.error == claim.job.unreadable
    assert await letters.purge(job_id) == 1 and await letters.count() == 2
