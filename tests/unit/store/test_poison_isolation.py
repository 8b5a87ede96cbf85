"""Poison isolation: a job whose worker was lost mid-attempt runs its last attempt alone, so a text that crashes its
process dead-letters itself and never its batch-mates (real redis-server, injected clock)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, params, task_id
from ttsq.domain.jobs import Status
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Failed

SWEEP = 5.0
LEASE = 30.0


async def lapse(queue: JobQueue, redis: Redis, clock: FakeClock) -> int:
    """Let every lease lapse (the worker holding them died) and sweep; return how many were requeued."""
    clock.advance(LEASE + 1)
    await redis.delete(queue.keys.sweep_lock)
    return (await queue.leases.sweep(SWEEP, "sweeper")).requeued


@pytest.mark.parametrize("max_attempts", [2, 3, 4])
async def test_a_process_killing_job_in_a_batch_of_eight_dead_letters_only_itself(
    make_queue: Any, redis: Redis, clock: FakeClock, max_attempts: int
) -> None:
    """A job that kills every worker it runs on, in a batch of eight: its batch-mates come back at the front and run
    again together while they have attempts to spare (a re-run that ran alone would wait behind every row in flight),
    and alone on their last attempt, so the poison job never costs one of them its last attempt: all seven finish, and
    only the poison job is dead-lettered."""
    api: JobQueue = make_queue(lease_s=LEASE, max_attempts=max_attempts)
    queue: JobQueue = make_queue(lease_s=LEASE, max_attempts=20)  # a worker's own setting: the job's, set at enqueue, rules
    ids = [task_id() for _ in range(8)]
    poison = ids[3]
    for job_id in ids:
        await api.enqueue(job_id, params(f"sentence {job_id}"), single_flight=False)

    crashes = 0
    while True:
        claim = await queue.leases.claim(f"w{crashes + 1}", block_s=0.1)
        if claim is None:
            break
        if not claim.runnable:
            continue  # dead-lettered at claim: no attempts left
        last_attempt = claim.job.attempts == max_attempts
        assert claim.job.isolate == (claim.job.attempts > 1 and last_attempt), (
            f"attempt {claim.job.attempts} of {max_attempts}: alone only where it is the job's last"
        )
        batch = [claim] if claim.job.isolate else [claim, *await queue.leases.claim_more("w", 7)]
        if claim.job.isolate:
            assert await queue.leases.claim_more("w", 7) == [], "a marked job runs alone: nothing joins its batch"
        if poison in {c.job.id for c in batch}:  # it kills this worker, and every job in hand with it
            crashes += 1
            await lapse(queue, redis, clock)
            continue
        for c in batch:
            assert str(await queue.leases.complete(c.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None)) == "done"

    finals = {job_id: await queue.get(job_id) for job_id in ids}
    assert all(job is not None for job in finals.values())
    assert {job_id for job_id, job in finals.items() if job and job.status is Status.FAILED} == {poison}
    assert all(job.status is Status.DONE for job_id, job in finals.items() if job and job_id != poison), (
        "every innocent job finishes, on its last attempt at the latest"
    )
    assert crashes == max_attempts, "the poison job used up its own attempts"
    dead = await DeadLetters(queue).newest()
    assert [job.id for job in dead] == [poison], "the dead-letter list holds only the poison job"
    assert dead[0].error is not None and "lease expired" in dead[0].error


async def test_a_fresh_batch_stops_at_a_marked_job_and_exceptions_mark_nothing(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    queue: JobQueue = make_queue(lease_s=LEASE, max_attempts=2)  # a job lost once has its last attempt left
    lost, failing, fresh = task_id(), task_id(), task_id()
    await queue.enqueue(lost, params("lost"), single_flight=False)
    assert await queue.leases.claim("gone", block_s=0.1) is not None
    await lapse(queue, redis, clock)  # lost is back at the front, marked: its next attempt is its last
    await queue.enqueue(failing, params("failing"), single_flight=False)
    await queue.enqueue(fresh, params("fresh"), single_flight=False)

    # Filling a batch stops at the marked job at the front; a blocking claim takes it (the worker then
    # runs it alone), and the next batch holds the two unmarked jobs.
    assert await queue.leases.claim_more("w", 4) == []
    alone = await queue.leases.claim("w", block_s=0.1)
    assert alone is not None and alone.job.id == lost and alone.job.isolate
    head = await queue.leases.claim("w", block_s=0.1)
    assert head is not None and head.job.id == failing and not head.job.isolate
    more = await queue.leases.claim_more("w", 4)
    assert [c.job.id for c in more] == [fresh]
    for claim in (alone, *more):
        assert str(await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None)) == "done"

    # A Python exception is recorded by the worker: the job is retried, but not isolated.
    assert await queue.leases.fail(head.job, "boom", retryable=True, cache_key=None) is Failed.RETRY
    clock.advance(3600)
    await redis.delete(queue.keys.sweep_lock)
    await queue.leases.sweep(SWEEP, "sweeper")
    retried = await queue.leases.claim("w", block_s=0.1)
    assert retried is not None and retried.job.id == failing and not retried.job.isolate
