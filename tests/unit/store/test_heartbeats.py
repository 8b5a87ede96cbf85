"""Workers' heartbeats against a real redis-server: who counts as live, for how long, and what the sweep does with a
worker whose heartbeat has lapsed (its claims come back a TTL after its death, not a lease after).

Time is the test's (:class:`tests.conftest.FakeClock`, pinning the Redis clock the beats are timed by):
a heartbeat ages out exactly when the test advances the clock past ``HEARTBEAT_TTL_S``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, claimed, params, queue_config, task_id
from ttsq.domain.jobs import Status
from ttsq.store.clock import RedisClock
from ttsq.store.heartbeats import FORGET_AFTER_TTLS, Heartbeats
from ttsq.store.keys import Shards
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Cancelled, Completed, SweepReport
from ttsq.store.streams import AudioStreams


def heartbeats(redis: Redis, clock: FakeClock, ttl_s: int = 5) -> Heartbeats:
    shards = Shards(queue_config().namespace, 1)
    return Heartbeats(redis, shards, ttl_s, RedisClock(redis, clock, shards.home.stats))


async def test_heartbeats_count_live_workers(redis: Redis, clock: FakeClock) -> None:
    pool = heartbeats(redis, clock, ttl_s=5)
    assert await pool.live_count() == 0
    await pool.write("w1", {"worker_id": "w1"})
    clock.advance(3)
    await pool.write("w2", {"worker_id": "w2"})
    assert await pool.live_count() == 2
    clock.advance(3)
    assert await pool.live_count() == 1, "w1's last heartbeat is older than the TTL"
    await pool.remove("w2")
    assert await pool.live_count() == 0


async def test_a_heartbeat_stores_the_record_for_the_ttl(redis: Redis, clock: FakeClock) -> None:
    pool = heartbeats(redis, clock, ttl_s=5)
    await pool.write("w1", {"worker_id": "w1", "ready": True})
    key = pool.keys.worker("w1")
    assert json.loads(await redis.get(key) or b"{}") == {"worker_id": "w1", "ready": True}
    assert 0 < await redis.ttl(key) <= 5
    assert key.startswith("{ttsq}:"), "every key shares the namespace's hash tag"


async def test_a_long_silent_worker_leaves_the_set(redis: Redis, clock: FakeClock) -> None:
    pool = heartbeats(redis, clock, ttl_s=5)
    await pool.write("gone", {})
    clock.advance(FORGET_AFTER_TTLS * 5 + 1)
    await pool.write("here", {})
    assert await redis.zrange(pool.keys.workers, 0, -1) == [b"here"]


# ---- liveness: a dead worker's claims are taken back by its heartbeat, not its lease -----------------------------


LEASE_S = 30.0
TTL_S = 2  # a whole number, as the record's expiry once had to be


def liveness(make_queue: Any, **overrides: Any) -> tuple[JobQueue, Heartbeats]:
    """A queue whose lease is long (30 s) beside a heartbeat TTL of 2 s, and its workers' heartbeats, on the test's clock."""
    queue: JobQueue = make_queue(lease_s=LEASE_S, heartbeat_ttl_s=TTL_S, heartbeat_interval_s=0.5, **overrides)
    return queue, Heartbeats(queue.redis, queue.shards, TTL_S, queue.clock)


async def beating(clock: FakeClock, beats: Heartbeats, seconds: float, *workers: str) -> None:
    """Let ``seconds`` pass while ``workers`` beat every half second (a silent worker is one left out)."""
    steps = round(seconds / 0.5)
    for step in range(steps):
        clock.advance(seconds - 0.5 * (steps - 1) if step == steps - 1 else 0.5)
        for worker in workers:
            await beats.write(worker, {})


async def sweep(queue: JobQueue, holder: str = "sweeper") -> SweepReport:
    """One sweep now, whoever swept last (each shard's interval lock is cleared first)."""
    await queue.redis.delete(*(keys.sweep_lock for keys in queue.shards.all))
    return await queue.leases.sweep(1.0, holder)


async def test_a_worker_whose_heartbeat_stops_has_its_jobs_requeued_after_the_ttl_not_the_lease(
    make_queue: Any, clock: FakeClock
) -> None:
    queue, beats = liveness(make_queue)
    job_id, behind = task_id(), task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("doomed", {})
    claim = await claimed(queue, "doomed")
    await queue.enqueue(behind, params(), single_flight=False)
    await beating(clock, beats, 1.0, "sweeper", "doomed")  # the doomed worker's last beat, at 1.0 s
    await beating(clock, beats, 1.0, "sweeper")
    await sweep(queue)
    assert await queue.redis.lpos(queue.keys.processing, job_id) is not None, "its last beat is a second old: it is alive"
    await beating(clock, beats, 1.1, "sweeper")
    report = await sweep(queue)
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.QUEUED, "2.1 s after its last beat; its lease has 27 s left"
    assert (report.abandoned, report.requeued) == (1, 0)
    assert job.worker is None and not job.isolate, "attempts to spare: it runs again at once, not alone"
    assert job.error is not None and "heartbeat stopped" in job.error
    assert await queue.position(job_id) == 0, "back at the front of its queue, before the job that waited behind it"
    assert await queue.redis.zscore(queue.keys.leases, job_id) is None
    assert await queue.redis.zcard(queue.keys.worker_jobs("doomed")) == 0
    again = await claimed(queue, "rescuer")
    assert again.job.id == job_id and again.job.attempts == 2 and again.token > claim.token


async def test_a_worker_that_beats_keeps_its_job_through_a_long_step(make_queue: Any, clock: FakeClock) -> None:
    """Its model is busy with one decode step for 25 s (longer than twelve TTLs), but its event loop beats: the job stays
    its own, and its lease renews afterwards as if nothing happened."""
    queue, beats = liveness(make_queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    claim = await claimed(queue, "busy")
    for _ in range(50):
        clock.advance(0.5)
        await beats.write("busy", {})
        await beats.write("sweeper", {})
        assert (await sweep(queue)) == SweepReport(swept=True)
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.RUNNING and job.claim == claim.token
    assert (await queue.leases.renew_leases({job_id: claim.token}, "busy")).lost == set()
    assert (await beats.write("busy", {})).fences == {}, "never declared dead: no fence"


async def test_a_worker_declared_dead_learns_it_at_its_next_beat_and_its_stale_writes_are_refused(
    make_queue: Any, clock: FakeClock
) -> None:
    """A worker whose event loop stalled past the TTL (a long GC pause, a SIGSTOP) comes back: its next beat carries the
    fence (the claims up to it were taken back), and everything it would still write under its old claim is refused."""
    queue, beats = liveness(make_queue)
    stalled = task_id()
    await queue.enqueue(stalled, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("stalled", {})
    claim = await claimed(queue, "stalled")
    await beating(clock, beats, TTL_S + 0.1, "sweeper")
    assert (await sweep(queue)).abandoned == 1
    later = await claimed(queue, "stalled")  # its claim loop ran before its beat: a new claim, after the fence
    assert later.job.id == stalled, "the taken-back job was at the front"
    fences = (await beats.write("stalled", {})).fences
    assert fences == {queue.keys.prefix: fences[queue.keys.prefix]} and claim.token <= fences[queue.keys.prefix] < later.token
    assert (await beats.write("stalled", {})).fences == {}, "the fence is told once"
    assert await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.STALE
    assert not await AudioStreams(queue.redis, queue.shards, 60).publish(stalled, claim.token, 0, 1, b"\0\0", fresh=True)
    assert stalled in (await queue.leases.renew_leases({stalled: claim.token}, "stalled")).lost
    assert await queue.leases.complete(later.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.DONE


async def test_after_an_outage_no_worker_is_dead_until_the_sweeper_has_beaten_for_a_ttl(make_queue: Any, clock: FakeClock) -> None:
    """Redis was away for 5 s: every worker's last beat is old when it returns, and the first to beat and sweep must not
    take the others' jobs — they get one TTL from its return to beat again."""
    queue, beats = liveness(make_queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("other", {})
    await claimed(queue, "other")
    clock.advance(5.0)  # nobody reaches Redis
    await beats.write("sweeper", {})
    assert (await sweep(queue)).abandoned == 0, "the sweeper's own beats broke off too: it judges nobody yet"
    clock.advance(0.5)
    await beats.write("other", {})
    for _ in range(4):
        clock.advance(0.5)
        await beats.write("sweeper", {})
        await beats.write("other", {})
        assert (await sweep(queue)).abandoned == 0
    await beating(clock, beats, TTL_S + 0.1, "sweeper")
    assert (await sweep(queue)).abandoned == 1, "now its silence is its own"


async def test_a_blip_shorter_than_the_ttl_declares_nobody_dead(make_queue: Any, clock: FakeClock) -> None:
    """Redis away for 1.9 s, under the 2 s TTL: the sweeper's gap (2.0 s) is within the TTL, but the other worker, whose
    beats fall just before the sweeper's, has not beaten for 2.4 s when the sweeper first sweeps after it. The sweeper's
    run broke off all the same (a gap over half the TTL), so it judges nobody until it has beaten for a TTL again."""
    queue, beats = liveness(make_queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("other", {})
    await claimed(queue, "other")
    await beating(clock, beats, 2.0, "other", "sweeper")  # both beat, the sweeper 0.4 s after the other
    clock.advance(0.4)
    await beats.write("sweeper", {})
    clock.advance(2.0)  # Redis away for 1.9 s of it: neither reaches it
    await beats.write("sweeper", {})
    assert (await sweep(queue)).abandoned == 0, "the other's last beat is 2.4 s old, but the sweeper's own 2.0 s gap broke its run"
    clock.advance(0.1)
    await beats.write("other", {})
    await beating(clock, beats, 2.5, "other", "sweeper")
    assert (await sweep(queue)).abandoned == 0
    job = await queue.get(job_id)
    assert job is not None and job.status is Status.RUNNING


async def test_a_stopped_worker_s_abandoned_jobs_are_requeued_at_the_next_sweep(make_queue: Any, clock: FakeClock) -> None:
    """A worker stopping past its grace period leaves its jobs in hand: retiring marks its beat lapsed at once."""
    queue, beats = liveness(make_queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("leaving", {})
    await claimed(queue, "leaving")
    await beating(clock, beats, TTL_S, "sweeper", "leaving")
    await beats.remove("leaving")
    assert await beats.live_count() == 1
    assert (await sweep(queue)).abandoned == 1


async def test_renewals_prune_the_worker_s_claims_to_the_jobs_it_holds(make_queue: Any, redis: Redis) -> None:
    queue, _ = liveness(make_queue)
    done, held = task_id(), task_id()
    await queue.enqueue(done, params(), single_flight=False)
    await queue.enqueue(held, params(), single_flight=False)
    first, second = await claimed(queue, "w"), await claimed(queue, "w")
    assert await queue.leases.complete(first.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.DONE
    assert await redis.zrange(queue.keys.worker_jobs("w"), 0, -1) == [done.encode(), held.encode()]
    await queue.leases.renew_leases({held: second.token}, "w")
    assert await redis.zrange(queue.keys.worker_jobs("w"), 0, -1, withscores=True) == [(held.encode(), second.token)]
    assert 0 < await redis.pttl(queue.keys.worker_jobs("w")) <= 2 * LEASE_S * 1000


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_dead_worker_s_jobs_come_back_on_every_shard(make_queue: Any, clock: FakeClock, shards: int) -> None:
    queue, beats = liveness(make_queue, queue_shards=shards)
    ids = [task_id() for _ in range(6)]
    for job_id in ids:
        await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("doomed", {})
    claims = [await claimed(queue, "doomed") for _ in ids]
    assert {claim.job.id for claim in claims} == set(ids)
    await beating(clock, beats, TTL_S + 0.1, "sweeper")
    assert (await sweep(queue)).abandoned == len(ids)
    fences = (await beats.write("doomed", {})).fences
    held = {claim.job.id for claim in claims if claim.token <= fences.get(queue.shards.of(claim.job.id).prefix, 0)}
    assert held == set(ids), "every shard's fence covers the claims it took back"


# ---- cancels of running jobs, announced to their worker ---------------------------------------------------------


async def test_a_running_job_s_cancel_is_announced_once_naming_its_worker_and_claim(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    running, waiting = task_id(), task_id()
    await queue.enqueue(running, params(), single_flight=False)
    await queue.enqueue(waiting, params(), single_flight=False)
    claim = await claimed(queue, "w~1")
    after = await queue.leases.last_cancel(queue.keys)
    assert await queue.cancel(claim.job, None) is Cancelled.CANCELLING
    assert await queue.cancel(claim.job, None) is Cancelled.CANCELLING, "asked again: nothing new to announce"
    waiting_job = await queue.get(waiting)
    assert waiting_job is not None and await queue.cancel(waiting_job, None) is Cancelled.CANCELLED
    after, notices = await queue.leases.cancel_notices(queue.keys, after, 0.05)
    assert [(n.job_id, n.worker, n.claim) for n in notices] == [(running, "w~1", claim.token)]
    assert notices[0].at > 0
    nothing_more = (await queue.leases.cancel_notices(queue.keys, after, 0.05))[1]
    assert nothing_more == [], "nothing more: a waiting job's cancel is not announced"
