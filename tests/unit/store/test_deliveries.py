"""The webhook delivery queue against a real redis-server: claims, leases, fencing, retries, sweeps.

Time is the test's (:class:`tests.conftest.FakeClock`): a lease lapses or a retry falls due exactly
when the test advances the clock. The HTTP side is in ``tests/integration/runtime/test_webhooks.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, params, settings, task_id
from ttsq.domain.jobs import Job, Status
from ttsq.store.deliveries import (
    LOG_MAX,
    AttemptOutcome,
    DeliveryAttempt,
    DeliveryConfig,
    DeliveryQueue,
    DeliveryState,
    DeliverySummary,
)
from ttsq.store.keys import Keys
from ttsq.store.replies import Leased, LeaseReply, Settled

LEASE_S = 30.0


def delivery_config(**overrides: Any) -> DeliveryConfig:
    """The delivery queue's config as settings build it (``WEBHOOK_LEASE_S``, ``RESULT_TTL_S``, ...)."""
    return settings(**overrides).delivery_config()


def namespace() -> str:
    return delivery_config().namespace


async def finished_job(
    redis: Redis,
    clock: FakeClock,
    callback_url: str | None = "https://hooks.example/ttsq",
    *,
    status: Status = Status.DONE,
    error: str | None = None,
    ttl_s: int = 3600,
    due: bool = True,
) -> str:
    """Store a finished job as the completing script leaves it, and (``due``) push its delivery as that script does."""
    keys = Keys(namespace())
    job_id = task_id()
    job = Job.model_validate(
        {
            "id": job_id,
            "status": status,
            "params": params(callback_url=callback_url).model_dump(),
            "max_attempts": 3,
            "attempts": 1,
            "created_at": clock.now - 5,
            "finished_at": clock.now,
            "duration_s": 1.25 if status is Status.DONE else None,
            "error": error,
        }
    )
    await redis.set(keys.job(job_id), job.model_dump_json(), ex=ttl_s)
    if due:
        await redis.lpush(keys.deliveries, job_id)
    return job_id


@pytest.fixture
def deliveries(redis: Redis, clock: FakeClock) -> DeliveryQueue:
    return DeliveryQueue(redis, delivery_config(webhook_lease_s=LEASE_S, result_ttl_s=600), clock=clock)


def attempt(number: int, outcome: AttemptOutcome, clock: FakeClock, **fields: Any) -> DeliveryAttempt:
    return DeliveryAttempt(attempt=number, at=clock.now, outcome=outcome, **fields)


async def test_claim_leases_and_success_forgets_the_delivery(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    job_id = await finished_job(redis, clock, ttl_s=3600)
    lease = await deliveries.claim("d1", block_s=0.1)
    assert lease is not None and lease.job_id == job_id and lease.attempts == 0 and lease.holder == "d1"
    assert lease.deadline == clock.now + LEASE_S
    assert await redis.lrange(deliveries.keys.deliveries_processing, 0, -1) == [job_id.encode()]
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) == lease.deadline
    record = attempt(1, AttemptOutcome.DELIVERED, clock, status_code=204, elapsed_s=0.01)
    assert await deliveries.succeeded(lease, record) is Settled.SETTLED
    assert await redis.llen(deliveries.keys.deliveries_processing) == 0
    assert await redis.zcard(deliveries.keys.delivery_leases) == 0
    assert await redis.zcard(deliveries.keys.deliveries_delayed) == 0
    assert await deliveries.log(job_id) == [record]
    ttl = await redis.ttl(deliveries.keys.delivery_log(job_id))
    assert 3500 < ttl <= 3600, "the log expires with the job, not after the fallback TTL (600)"


async def test_a_log_whose_job_has_no_ttl_gets_the_fallback(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    job_id = await finished_job(redis, clock)
    await redis.persist(deliveries.keys.job(job_id))
    lease = await deliveries.claim("d1", block_s=0)
    assert lease is not None
    await deliveries.give_up(lease, attempt(1, AttemptOutcome.GAVE_UP, clock, error="no"))
    assert 0 < await redis.ttl(deliveries.keys.delivery_log(job_id)) <= 600


async def test_claim_on_an_empty_queue_returns_none(deliveries: DeliveryQueue) -> None:
    assert await deliveries.claim("d1", block_s=0) is None
    assert await deliveries.claim("d1", block_s=0.05) is None


async def test_deliveries_are_claimed_in_completion_order(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    first, second = await finished_job(redis, clock), await finished_job(redis, clock)
    one, two = await deliveries.claim("d", 0), await deliveries.claim("d", 0)
    assert one is not None and two is not None and (one.job_id, two.job_id) == (first, second)


async def test_a_retry_waits_for_its_time_then_a_sweep_releases_it(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    job_id = await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    assert lease is not None
    at = clock.now + 40
    record = attempt(1, AttemptOutcome.RETRYING, clock, status_code=500, error="the receiver answered 500", next_attempt_at=at)
    assert await deliveries.retry(lease, record, at) is Settled.SETTLED
    assert await redis.zscore(deliveries.keys.deliveries_delayed, job_id) == at
    assert await redis.llen(deliveries.keys.deliveries_processing) == 0
    clock.advance(39)
    assert (await deliveries.sweep()).promoted == 0
    assert await deliveries.claim("d1", 0) is None, "a retry must not run before its time"
    clock.advance(1)
    assert (await deliveries.sweep()).promoted == 1
    again = await deliveries.claim("d2", 0)
    assert again is not None and again.job_id == job_id and again.attempts == 1, "the next attempt is numbered from the log"
    assert await redis.zcard(deliveries.keys.deliveries_delayed) == 0


async def test_a_lapsed_lease_is_requeued_and_the_stale_holder_is_fenced_off(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    job_id, behind = await finished_job(redis, clock), await finished_job(redis, clock)
    stale = await deliveries.claim("crashed", 0)
    assert stale is not None and stale.job_id == job_id
    clock.advance(LEASE_S - 0.1)
    assert (await deliveries.sweep()).requeued == 0, "a live lease must not be swept"
    clock.advance(0.2)
    assert (await deliveries.sweep()).requeued == 1
    assert await redis.llen(deliveries.keys.deliveries_processing) == 0
    fresh = await deliveries.claim("live", 0)
    assert fresh is not None and fresh.job_id == job_id, "a requeued delivery goes to the front"
    assert await deliveries.renew(stale) is None, "the stale holder cannot renew another's lease"
    at = clock.now + 10
    late = attempt(1, AttemptOutcome.RETRYING, clock, status_code=500, error="x", next_attempt_at=at)
    assert await deliveries.retry(stale, late, at) is Settled.LOST
    assert await redis.zcard(deliveries.keys.deliveries_delayed) == 0, "a stale holder schedules nothing"
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) == fresh.deadline, "nor releases the live lease"
    done = attempt(2, AttemptOutcome.DELIVERED, clock, status_code=200)
    assert await deliveries.succeeded(fresh, done) is Settled.SETTLED
    assert [record.outcome for record in await deliveries.log(job_id)] == [AttemptOutcome.RETRYING, AttemptOutcome.DELIVERED]
    assert await redis.lrange(deliveries.keys.deliveries, 0, -1) == [behind.encode()]


async def test_renewal_moves_the_deadline_and_returns_the_new_token(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    job_id = await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    assert lease is not None
    clock.advance(20)
    renewed = await deliveries.renew(lease)
    assert renewed is not None and renewed.deadline == clock.now + LEASE_S
    clock.advance(20)
    assert (await deliveries.sweep()).requeued == 0, "a renewed lease outlives its first deadline"
    assert await deliveries.renew(lease) is None, "the old token no longer holds"
    assert await deliveries.succeeded(lease, attempt(1, AttemptOutcome.DELIVERED, clock)) is Settled.LOST
    assert await deliveries.succeeded(renewed, attempt(1, AttemptOutcome.DELIVERED, clock)) is Settled.SETTLED
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) is None


async def test_a_sweep_leaves_live_leases_alone(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    job_id = await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    assert lease is not None
    clock.advance(5)
    report = await deliveries.sweep()
    assert (report.requeued, report.orphans) == (0, 0)
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) == lease.deadline, "the holder's token is intact"
    assert await deliveries.succeeded(lease, attempt(1, AttemptOutcome.DELIVERED, clock)) is Settled.SETTLED


async def test_an_id_claimed_but_never_leased_is_requeued_after_a_grace_lease(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    job_id = await finished_job(redis, clock)
    # A deliverer that died between BLMOVE and the lease script.
    await redis.lmove(deliveries.keys.deliveries, deliveries.keys.deliveries_processing, "RIGHT", "LEFT")
    first = await deliveries.sweep()
    assert first.orphans == 1 and first.requeued == 0
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) == clock.now + LEASE_S
    clock.advance(LEASE_S + 1)
    assert (await deliveries.sweep()).requeued == 1
    lease = await deliveries.claim("d2", 0)
    assert lease is not None and lease.job_id == job_id


async def test_a_lease_script_after_the_grace_lease_still_wins(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    """The sweep may grace-lease an id between a claimer's BLMOVE and its lease script: the claimer keeps it."""
    job_id = await finished_job(redis, clock)
    await redis.lmove(deliveries.keys.deliveries, deliveries.keys.deliveries_processing, "RIGHT", "LEFT")
    await deliveries.sweep()
    clock.advance(1)
    reply = await deliveries._lease(keys=deliveries._lease_keys(job_id), args=[job_id, deliveries.clock.arg(), LEASE_S])
    assert LeaseReply.parse(reply).leased is Leased.LEASED
    assert await redis.zscore(deliveries.keys.delivery_leases, job_id) == clock.now + LEASE_S


async def test_the_sweep_is_idempotent(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    lapsed, retried = await finished_job(redis, clock), await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    other = await deliveries.claim("d1", 0)
    assert lease is not None and other is not None and (lease.job_id, other.job_id) == (lapsed, retried)
    await deliveries.retry(other, attempt(1, AttemptOutcome.RETRYING, clock, next_attempt_at=clock.now + 5), clock.now + 5)
    clock.advance(LEASE_S + 1)
    first = await deliveries.sweep()
    assert (first.requeued, first.orphans, first.promoted) == (1, 0, 1)
    second = await deliveries.sweep()
    assert (second.requeued, second.orphans, second.promoted) == (0, 0, 0)
    assert sorted(await redis.lrange(deliveries.keys.deliveries, 0, -1)) == sorted([lapsed.encode(), retried.encode()])


async def test_a_finished_delivery_pushed_again_is_dropped_at_claim(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    job_id = await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    assert lease is not None
    await deliveries.succeeded(lease, attempt(1, AttemptOutcome.DELIVERED, clock, status_code=200))
    await redis.lpush(deliveries.keys.deliveries, job_id)
    assert await deliveries.claim("d1", 0) is None
    assert await redis.llen(deliveries.keys.deliveries_processing) == 0
    assert await redis.zcard(deliveries.keys.delivery_leases) == 0
    assert len(await deliveries.log(job_id)) == 1


async def test_a_delivery_whose_task_expired_is_dropped_at_claim(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    job_id = await finished_job(redis, clock)
    await redis.delete(deliveries.keys.job(job_id))
    assert await deliveries.claim("d1", 0) is None
    assert await redis.llen(deliveries.keys.deliveries_processing) == 0
    assert await redis.zcard(deliveries.keys.delivery_leases) == 0


async def test_acknowledgements_refuse_a_record_of_the_wrong_kind(
    deliveries: DeliveryQueue, redis: Redis, clock: FakeClock
) -> None:
    await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    assert lease is not None
    with pytest.raises(ValueError):
        await deliveries.succeeded(lease, attempt(1, AttemptOutcome.GAVE_UP, clock))
    with pytest.raises(ValueError):
        await deliveries.retry(lease, attempt(1, AttemptOutcome.RETRYING, clock, next_attempt_at=5.0), 6.0)
    with pytest.raises(ValueError):
        await deliveries.give_up(lease, attempt(1, AttemptOutcome.DELIVERED, clock))


async def test_the_log_keeps_the_newest_records(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    job_id = await finished_job(redis, clock)
    for number in range(1, LOG_MAX + 6):
        lease = await deliveries.claim("d1", 0)
        assert lease is not None and lease.attempts == number - 1
        at = clock.now + 1
        await deliveries.retry(lease, attempt(number, AttemptOutcome.RETRYING, clock, next_attempt_at=at), at)
        clock.advance(1)
        await deliveries.sweep()
    log = await deliveries.log(job_id)
    assert len(log) == LOG_MAX and log[-1].attempt == LOG_MAX + 5 and log[0].attempt == 6


async def test_depths_count_due_in_flight_and_delayed(deliveries: DeliveryQueue, redis: Redis, clock: FakeClock) -> None:
    for _ in range(3):
        await finished_job(redis, clock)
    lease = await deliveries.claim("d1", 0)
    other = await deliveries.claim("d1", 0)
    assert lease is not None and other is not None
    await deliveries.retry(other, attempt(1, AttemptOutcome.RETRYING, clock, next_attempt_at=clock.now + 9), clock.now + 9)
    depths = await deliveries.depths()
    assert (depths.due, depths.in_flight, depths.delayed) == (1, 1, 1)


def test_the_summary_reads_the_last_attempt(clock: FakeClock) -> None:
    assert DeliverySummary.of([]).state is DeliveryState.PENDING
    log = [
        attempt(
            1, AttemptOutcome.RETRYING, clock, status_code=500, error="the receiver answered 500", next_attempt_at=clock.now + 7
        ),
    ]
    summary = DeliverySummary.of(log)
    assert (summary.state, summary.attempts, summary.last_status_code) == (DeliveryState.RETRYING, 1, 500)
    assert summary.next_attempt_at == clock.now + 7
    log.append(attempt(2, AttemptOutcome.DELIVERED, clock, status_code=200))
    done = DeliverySummary.of(log)
    assert (done.state, done.attempts, done.last_error, done.next_attempt_at) == (DeliveryState.DELIVERED, 2, None, None)


def test_an_attempt_record_round_trips_through_json(clock: FakeClock) -> None:
    record = attempt(3, AttemptOutcome.GAVE_UP, clock, error="refused", elapsed_s=0.5)
    assert DeliveryAttempt.from_json(record.to_json()) == record
