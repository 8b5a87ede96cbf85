"""The one Redis-outage policy and the chore runner that the worker and the webhook deliverer share.

Time is the test's where it decides anything: the chore runner reads an injected monotonic clock,
and pauses are ended by events (Redis seen back, a stop), never waited out. The outages here are
redis-py's own ``ConnectionError``; the loops that meet real ones are tested in ``tests/integration/runtime/test_worker.py``,
``tests/integration/runtime/test_webhooks.py`` and ``tests/chaos/test_worker_resume.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import FakeClock, claimed, params, queue_config, task_id
from ttsq.domain.batching import MemoryHygiene
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.runtime.sdnotify import SystemdNotifier
from ttsq.runtime.upkeep import FIRST_BACKOFF_S, MAX_BACKOFF_S, Chore, RedisOutage, Upkeep, WorkerChores
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue

log = logging.getLogger("tests.upkeep")


def outage(changes: list[bool] | None = None) -> RedisOutage:
    heard = None if changes is None else changes.append
    return RedisOutage(log, "retrying until it is back", resumed="work resumes", on_change=heard)


def stopped() -> asyncio.Event:
    stop = asyncio.Event()
    stop.set()
    return stop


# ---- the outage policy --------------------------------------------------------------------------


async def test_an_outage_is_reported_once_marked_and_its_end_said_once(caplog: pytest.LogCaptureFixture) -> None:
    changes: list[bool] = []
    redis = outage(changes)
    with caplog.at_level(logging.INFO, logger="tests.upkeep"):
        redis.lost("claim", RedisConnectionError("refused"))
        redis.lost("heartbeat", RedisConnectionError("refused"))
        assert not redis.ok
        redis.back()
        redis.back()
    assert [record.getMessage() for record in caplog.records] == [
        "Redis unavailable (claim: ConnectionError: refused); retrying until it is back",
        "Redis is reachable again; work resumes",
    ]
    assert redis.ok and changes == [False, True], "each change of state is heard once"


async def test_the_backoff_doubles_up_to_its_cap_and_starts_over_once_redis_answers() -> None:
    redis = outage()
    redis.lost("claim", RedisConnectionError("refused"))
    pauses = []
    for _ in range(7):
        pauses.append(redis.backoff_s)
        await redis.back_off(stopped())  # the stop ends each pause at once; the backoff still grows
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, MAX_BACKOFF_S, MAX_BACKOFF_S]
    redis.back()
    assert redis.backoff_s == FIRST_BACKOFF_S


async def test_a_pause_ends_as_soon_as_redis_is_seen_back() -> None:
    redis = outage()
    redis.lost("claim", RedisConnectionError("refused"))
    pause = asyncio.create_task(redis.pause(3600))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not pause.done(), "an outage holds the pause"
    redis.back()  # what a chore's successful Redis call does
    await asyncio.wait_for(pause, 10)


async def test_persist_retries_a_write_through_an_outage_until_it_lands() -> None:
    redis = outage()
    calls = 0

    async def write() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            asyncio.get_running_loop().call_soon(redis.back)  # a chore sees Redis back while the write waits
            raise RedisConnectionError("refused")
        return "stored"

    assert await redis.persist(write, "store a job outcome", give_up=lambda: False) == "stored"
    assert calls == 3 and redis.ok


async def test_persist_gives_up_when_told_and_the_error_propagates() -> None:
    redis = outage()

    async def write() -> None:
        raise RedisConnectionError("refused")

    with pytest.raises(RedisConnectionError):
        await redis.persist(write, "store a job outcome", give_up=lambda: True)
    assert not redis.ok


# ---- the chore runner ---------------------------------------------------------------------------


async def test_each_chore_runs_on_its_own_interval() -> None:
    clock = FakeClock(now=100.0)
    ran: list[str] = []

    def chore(name: str, interval_s: float) -> Chore:
        async def run() -> None:
            ran.append(name)

        return Chore(name, interval_s, run)

    upkeep = Upkeep([chore("heartbeat", 2.0), chore("sweep", 5.0)], outage(), log, clock=clock)
    assert await upkeep.run_due() == 2.0 and ran == ["heartbeat", "sweep"], "every chore runs on the first pass"
    clock.advance(2.0)
    assert await upkeep.run_due() == 2.0 and ran[2:] == ["heartbeat"]
    clock.advance(1.0)
    assert await upkeep.run_due() == 1.0 and ran[3:] == [], "nothing is due: the runner says how long to sleep"
    clock.advance(1.0)
    assert await upkeep.run_due() == 1.0 and ran[3:] == ["heartbeat"]
    clock.advance(1.0)
    assert await upkeep.run_due() == 1.0 and ran[4:] == ["sweep"]


async def test_a_failing_chore_is_reported_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    redis = outage()
    ran: list[str] = []

    async def unreachable() -> None:
        raise RedisConnectionError("refused")

    async def broken() -> None:
        raise ValueError("a bug")

    async def fine() -> None:
        ran.append("fine")

    upkeep = Upkeep([Chore("heartbeat", 1.0, unreachable), Chore("sweep", 1.0, broken)], redis, log, clock=FakeClock())
    with caplog.at_level(logging.INFO, logger="tests.upkeep"):
        await upkeep.run_due()
    assert not redis.ok, "a Redis error marks the outage"
    assert "sweep failed; trying again in 1.0s" in caplog.text and "a bug" in caplog.text
    await upkeep.run_chore(Chore("lease renewal", 1.0, fine))
    assert redis.ok and ran == ["fine"], "a chore that reaches Redis ends the outage"


async def test_upkeep_calls_every_pass_then_ends_by_signal() -> None:
    passes = 0
    seen = asyncio.Event()

    def every_pass() -> None:
        nonlocal passes
        passes += 1
        seen.set()

    async def idle() -> None:
        return None

    upkeep = Upkeep([Chore("heartbeat", 3600.0, idle)], outage(), log, every_pass=every_pass)
    upkeep.start()
    await asyncio.wait_for(seen.wait(), 10)
    task = upkeep._task
    await upkeep.stop(wait_s=10)
    assert task is not None and task.done() and not task.cancelled(), "it left its sleep on the signal"
    assert passes == 1


async def test_a_chore_that_never_returns_is_cancelled_after_the_wait() -> None:
    started = asyncio.Event()

    async def stuck() -> None:
        started.set()
        await asyncio.Event().wait()

    upkeep = Upkeep([Chore("heartbeat", 1.0, stuck)], outage(), log)
    upkeep.start()
    await asyncio.wait_for(started.wait(), 10)
    task = upkeep._task
    await upkeep.stop(wait_s=0.01)
    assert task is not None and task.cancelled()


async def test_a_chore_that_called_no_redis_never_ends_an_outage() -> None:
    """A worker pointed at a Redis that refused every command once logged "reachable again" once a second,
    because a chore with nothing to do (no lease to renew, a memory chore) counted as a Redis success."""
    redis = outage()
    calls: list[str] = []

    async def nothing_to_do() -> bool:
        calls.append("idle")
        return False

    async def wrote() -> None:
        calls.append("wrote")

    upkeep = Upkeep([Chore("idle", 1.0, nothing_to_do), Chore("wrote", 1.0, wrote)], redis, log, clock=FakeClock())
    redis.lost("claim", RedisConnectionError("refused"))
    await upkeep.run_chore(upkeep.chores[0])
    assert not redis.ok, "a chore that called no Redis says nothing about it"
    await upkeep.run_chore(upkeep.chores[1])
    assert redis.ok and calls == ["idle", "wrote"]


# ---- the worker's chores ------------------------------------------------------------------------


def worker_chores(
    queue: JobQueue,
    running: dict[str, int],
    idle_s: list[float],
    released: list[str],
    hygiene: MemoryHygiene | None = None,
    drop: Callable[[str], None] | None = None,
) -> WorkerChores:
    """The chores over a worker's state as the test holds it: jobs in hand, how long the engine has been idle, what a
    memory release did, and (``drop``) what the worker lets go of when its heartbeat finds it was declared dead."""

    async def release() -> None:
        released.append("released")

    def cancel(job_id: str) -> None:
        raise AssertionError(f"nothing runs here to cancel ({job_id})")

    return WorkerChores(
        queue,
        Heartbeats(queue.redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock),
        HeartbeatRecord(worker_id="chores"),
        WorkerMetrics(),
        log,
        worker_id="chores",
        sweep_interval_s=1.0,
        stall_after_s=10.0,
        systemd=SystemdNotifier(None),
        hygiene=hygiene or MemoryHygiene(0.9, 60.0),
        running=running,
        in_flight={},
        idle_s=lambda: idle_s[-1],
        release_memory=release,
        cancel=cancel,
        drop=drop or cancel,
    )


async def test_idle_memory_is_released_once_per_idle_period_and_never_while_jobs_are_in_hand(redis: Redis) -> None:
    running: dict[str, int] = {}
    idle_s: list[float] = [30.0]
    released: list[str] = []
    hygiene = MemoryHygiene(0.9, 60.0)
    hygiene.after_batch(reserved=10, total=100, failed_for_memory=False)  # a batch left memory cached, under the threshold
    chores = worker_chores(JobQueue(redis, queue_config()), running, idle_s, released, hygiene)
    assert await chores.release_when_idle() is False, "it calls no Redis: its success says nothing of an outage"
    assert released == [], "not idle long enough"
    running["job"] = 1
    idle_s.append(61.0)
    await chores.release_when_idle()
    assert released == [], "a job in hand: the inference thread is not free"
    del running["job"]
    await chores.release_when_idle()
    await chores.release_when_idle()
    assert released == ["released"], "once per idle period"


async def test_lease_renewal_calls_no_redis_without_jobs_and_the_heartbeat_is_written(redis: Redis) -> None:
    queue = JobQueue(redis, queue_config())
    chores = worker_chores(queue, {}, [0.0], [])
    assert await chores.renew_leases() is False
    await chores.beat()
    assert chores.record.last_heartbeat is not None
    assert await chores.heartbeats.live_count() == 1


async def test_a_worker_declared_dead_drops_the_jobs_whose_claims_were_taken_back_at_its_next_beat(
    make_queue: Any, clock: FakeClock
) -> None:
    """Its event loop stalled past the heartbeat TTL, the sweep requeued its jobs, and it claimed one of them again
    before its beat: the beat drops the jobs held under the old claims, and keeps the one claimed since."""
    queue: JobQueue = make_queue(lease_s=30.0)
    first, second = task_id(), task_id()
    await queue.enqueue(first, params(), single_flight=False)
    await queue.enqueue(second, params(), single_flight=False)
    running: dict[str, int] = {}
    dropped: list[str] = []
    chores = worker_chores(queue, running, [0.0], [], drop=dropped.append)
    sweeper = Heartbeats(queue.redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock)
    await sweeper.write("sweeper", {})
    await chores.beat()
    for claim in (await claimed(queue, "chores"), await claimed(queue, "chores")):
        running[claim.job.id] = claim.token
    for _ in range(5):  # 2.5 s of the sweeper's beats, none of the stalled worker's
        clock.advance(0.5)
        await sweeper.write("sweeper", {})
    assert (await queue.leases.sweep(1.0, "sweeper")).abandoned == 2
    again = await claimed(queue, "chores")
    running[again.job.id] = again.token
    await chores.beat()
    kept = again.job.id
    assert dropped == [job_id for job_id in (first, second) if job_id != kept]
    assert chores.metrics.taken_back._value.get() == 1
    await chores.beat()
    assert len(dropped) == 1, "the fence is acted on once"
