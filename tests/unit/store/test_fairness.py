"""Fair share of the workers between tenants: per-tenant queues in two lanes, deficit round robin in the claim
script, on a real redis-server (docs/fairness.md).

Every test drives the queue itself (enqueue, claim, sweep, cancel) on the test's pinned clock, so a lease lapses
exactly when a test advances it; nothing sleeps.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis

from tests.conftest import FakeClock, params, queue_config, task_id
from ttsq.domain.jobs import Priority
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.metrics import TOP_TENANTS, QueueGauges
from ttsq.store.queue import JobQueue, QueueFullError
from ttsq.store.replies import text

SWEEP = 1.0


async def flood(queue: JobQueue, tenant: str, count: int, *, priority: Priority = "interactive", weight: int = 1) -> list[str]:
    ids = [task_id() for _ in range(count)]
    for job_id in ids:
        await queue.enqueue(job_id, params(job_id), single_flight=False, tenant=tenant, priority=priority, weight=weight)
    return ids


async def next_claims(queue: JobQueue, count: int) -> list[str]:
    """The ids of the next ``count`` claims, one claim at a time, each completed at once (a worker keeping up)."""
    taken = []
    for _ in range(count):
        claims = await queue.leases.claim_more("w", 1)
        assert len(claims) == 1, "a job was waiting"
        await queue.leases.complete(claims[0].job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)
        taken.append(claims[0].job.id)
    return taken


async def test_one_job_of_a_second_tenant_overtakes_a_thousand_job_backlog(make_queue: Any) -> None:
    """Key A queues 1,000 jobs, then key B submits one: B's job is among the next two claims (before fair queuing
    it came after A's 1,000)."""
    queue: JobQueue = make_queue()
    backlog = await flood(queue, "A", 1000)
    (late,) = await flood(queue, "B", 1)
    assert await queue.depth() == 1001, "the tally counts every tenant's jobs"
    assert await queue.position(late) == 1, "its estimate: A's current turn, then B"
    assert late in await next_claims(queue, 2)
    assert await next_claims(queue, 3) == backlog[1:4], "then A again, in its own order"


async def test_weights_three_to_one_share_claims_three_to_one(make_queue: Any) -> None:
    """Two saturating keys with weights 3 and 1 get 3:1 of the claimed and completed jobs (±10%) over a window."""
    queue: JobQueue = make_queue()
    heavy = set(await flood(queue, "heavy", 300, weight=3))
    await flood(queue, "light", 300, weight=1)
    window = Counter("heavy" if job_id in heavy else "light" for job_id in await next_claims(queue, 200))
    ratio = window["heavy"] / window["light"]
    assert 3 * 0.9 <= ratio <= 3 * 1.1, f"3:1 within 10%, got {dict(window)}"


async def test_an_interactive_job_overtakes_a_batch_backlog_of_its_own_tenant(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    await flood(queue, "A", 50, priority="batch")
    (urgent,) = await flood(queue, "A", 1, priority="interactive")
    assert await queue.position(urgent) == 0
    assert await next_claims(queue, 1) == [urgent]


async def test_a_batch_backlog_is_never_starved_by_interactive_work(make_queue: Any) -> None:
    """Strict priority would starve batch; after INTERACTIVE_BURST interactive claims in a row one batch claim comes."""
    queue: JobQueue = make_queue(interactive_burst=4)
    bulk = set(await flood(queue, "bulk", 100, priority="batch"))
    await flood(queue, "chat", 100, priority="interactive")
    taken = await next_claims(queue, 50)
    assert sum(job_id in bulk for job_id in taken) == 10, "one batch claim in every INTERACTIVE_BURST + 1"
    assert all(job_id in bulk for job_id in taken[4::5]), "exactly after each burst"


async def test_a_job_whose_lease_lapsed_goes_back_to_the_front_of_its_tenant(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    queue: JobQueue = make_queue(lease_s=10)
    ids = await flood(queue, "A", 3)
    b_ids = await flood(queue, "B", 2)
    lost = (await queue.leases.claim_more("dying", 1))[0]
    assert lost.job.id == ids[0]
    clock.advance(11)
    assert (await queue.leases.sweep(SWEEP, "sweeper")).requeued == 1
    assert await queue.waiting("A") == ids, "at the front of A's queue, ahead of A's other jobs"
    assert await queue.depth() == 5
    turn = await queue.leases.claim("w", block_s=0.1)
    assert turn is not None and turn.job.id == b_ids[0], "A's turn was over: B's comes first"
    again = await queue.leases.claim("w", block_s=0.1)
    assert again is not None and again.job.id == ids[0] and again.job.attempts == 2 and not again.job.isolate


async def test_a_retry_goes_to_the_back_of_its_tenant_and_a_drained_tenant_rejoins_the_ring(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    queue: JobQueue = make_queue(retry_base_s=2.0)
    (only,) = await flood(queue, "A", 1)
    claim = (await queue.leases.claim_more("w", 1))[0]
    await queue.leases.fail(claim.job, "transient", retryable=True, cache_key=None)
    assert await redis.llen(queue.keys.ring("interactive")) == 0, "A has nothing waiting: it left the ring"
    later = await flood(queue, "B", 1)
    clock.advance(3)
    assert (await queue.leases.sweep(SWEEP, "sweeper")).promoted == 1
    assert await queue.waiting("A") == [only]
    assert await redis.lrange(queue.keys.ring("interactive"), 0, -1) == [b"A", b"B"], "A joined behind B"
    assert await next_claims(queue, 2) == [*later, only]


async def test_cancelling_a_queued_job_takes_it_out_of_its_tenant_and_the_tally(make_queue: Any, redis: Redis) -> None:
    queue: JobQueue = make_queue()
    a_ids = await flood(queue, "A", 2)
    (b_only,) = await flood(queue, "B", 1)
    job = await queue.get(b_only)
    assert job is not None
    await queue.cancel(job, None)
    assert await queue.depth() == 2 and await queue.waiting("B") == []
    assert await redis.lrange(queue.keys.ring("interactive"), 0, -1) == [b"A"], "B has nothing left: out of the ring"
    first = await queue.get(a_ids[0])
    assert first is not None
    await queue.cancel(first, None)
    assert await next_claims(queue, 1) == [a_ids[1]]
    assert await queue.depth() == 0 and await queue.leases.claim_more("w", 1) == []


async def test_dead_lettering_and_requeue_keep_the_tenant(make_queue: Any, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=10, max_attempts=1)
    (doomed,) = await flood(queue, "A", 1, priority="batch")
    await queue.leases.claim_more("dying", 1)
    clock.advance(11)
    await queue.leases.sweep(SWEEP, "sweeper")
    dead = await queue.leases.claim("w", block_s=0.1)
    assert dead is not None and not dead.runnable, "no attempts left: dead-lettered at claim, as before"
    assert [job.id for job in await DeadLetters(queue).newest()] == [doomed] and await queue.depth() == 0
    await flood(queue, "B", 1, priority="batch")
    await DeadLetters(queue).requeue(doomed)
    assert await queue.waiting("A", "batch") == [doomed]
    assert await queue.depth() == 2


async def test_the_depth_cap_counts_every_tenant(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_queue_depth=3)
    await flood(queue, "A", 2)
    await flood(queue, "B", 1, priority="batch")
    with pytest.raises(QueueFullError):
        await flood(queue, "C", 1)


async def test_tenant_depth_metrics_name_the_top_tenants_and_sum_the_rest(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    for n in range(TOP_TENANTS + 2):
        await flood(queue, f"tenant{n:02d}", n + 1)
    await flood(queue, "tenant00", 1, priority="batch")
    registry = CollectorRegistry()
    gauges = QueueGauges(registry, queue, timeout_s=5.0)
    await gauges.refresh()
    scrape = generate_latest(registry).decode()
    series = [line for line in scrape.splitlines() if line.startswith("ttsq_tenant_queue_depth{")]
    assert len(series) == TOP_TENANTS + 2, "ten tenants by name, the rest as other in each lane"
    assert 'ttsq_tenant_queue_depth{priority="interactive",tenant="tenant11"} 12.0' in series
    assert 'ttsq_tenant_queue_depth{priority="interactive",tenant="other"} 3.0' in series, "tenant00's 1 and tenant01's 2"
    assert 'ttsq_tenant_queue_depth{priority="batch",tenant="other"} 1.0' in series


def test_claims_per_tenant_keep_a_bounded_set_of_labels() -> None:
    metrics = WorkerMetrics(tenant_labels=2)
    for tenant in ("a", "b", "c", "a", "d"):
        metrics.claimed(tenant, "interactive")
    scrape = metrics.exposition().decode()
    assert 'ttsq_tenant_jobs_claimed_total{priority="interactive",tenant="a"} 2.0' in scrape
    assert 'ttsq_tenant_jobs_claimed_total{priority="interactive",tenant="other"} 2.0' in scrape, "c and d"
    assert 'tenant="c"' not in scrape


# ---- the round robin's invariants, on random histories -------------------------------------------------------

_TENANTS = ("t1", "t2", "t3")
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from(_TENANTS), st.sampled_from(("interactive", "batch")), st.integers(1, 4)),
        st.tuples(st.just("claim"), st.integers(1, 4)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
    ),
    max_size=25,
)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
async def test_round_robin_invariants_hold_on_any_history(redis: Redis, steps: list[Any]) -> None:
    """Whatever is enqueued, claimed and cancelled: the tally is the sum of the tenants' queues, a lane's ring holds
    exactly its tenants with jobs waiting (once each), peek names what the claim then takes, every job is claimed
    at most once, and each tenant's jobs are claimed in the order it queued them."""
    await redis.flushall()
    queue = JobQueue(redis, queue_config(interactive_burst=2))
    queued: dict[str, tuple[str, str]] = {}
    order: dict[tuple[str, str], list[str]] = {}
    claimed: list[str] = []
    for step in steps:
        if step[0] == "enqueue":
            _, tenant, lane, weight = step
            (job_id,) = await flood(queue, tenant, 1, priority=lane, weight=weight)
            queued[job_id] = (tenant, lane)
            order.setdefault((tenant, lane), []).append(job_id)
        elif step[0] == "claim":
            claims = await queue.leases.claim_more("w", step[1])
            claimed += [claim.job.id for claim in claims]
            for claim in claims:
                queued.pop(claim.job.id)
        elif queued:
            victim = sorted(queued)[step[1] % len(queued)]
            job = await queue.get(victim)
            assert job is not None
            await queue.cancel(job, None)
            tenant, lane = queued.pop(victim)
            order[(tenant, lane)].remove(victim)
        lanes = ("interactive", "batch")
        lengths = {(t, lane): await redis.llen(queue.keys.tenant_queue(lane, t)) for t in _TENANTS for lane in lanes}
        assert await queue.depth() == sum(lengths.values()) == len(queued)
        for lane in ("interactive", "batch"):
            ring = [text(item) for item in await redis.lrange(queue.keys.ring(lane), 0, -1)]
            assert sorted(ring) == sorted(t for t in _TENANTS if lengths[(t, lane)] > 0), "the ring is who waits, once each"
    assert len(claimed) == len(set(claimed)), "no job claimed twice"
    for ids in order.values():
        taken = [job_id for job_id in claimed if job_id in ids]
        assert taken == ids[: len(taken)], "a tenant's jobs in the order it queued them"
