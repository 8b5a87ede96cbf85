"""The API's view of the workers (:class:`ttsq.api.stream_admission.WorkerWatch`): one read of the live workers
answers every waiter of the process for a fifth of ``NO_WORKER_S``; a read that cannot reach Redis says nothing, and
the workers get a whole window to beat again after it; a window of 0 is off."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import FakeClock
from ttsq.api.stream_admission import NoWorker, WorkerWatch

WINDOW_S = 5


class Pool:
    """The live-worker count as Redis would answer it: a number, or an outage; counts the reads."""

    def __init__(self) -> None:
        self.live: int | Exception = 1
        self.reads = 0

    async def count(self) -> int:
        self.reads += 1
        await asyncio.sleep(0)  # a round trip: concurrent askers overlap it
        if isinstance(self.live, Exception):
            raise self.live
        return self.live


async def test_one_read_answers_every_waiter_until_it_is_a_fifth_of_the_window_old() -> None:
    clock, pool = FakeClock(), Pool()
    watch = WorkerWatch(pool.count, WINDOW_S, monotonic=clock)
    await asyncio.gather(*(watch.require() for _ in range(100)))
    assert pool.reads == 1
    clock.advance(WINDOW_S / 5 - 0.01)
    await watch.require()
    assert pool.reads == 1
    clock.advance(0.02)
    pool.live = 0
    with pytest.raises(NoWorker):
        await watch.require()
    assert pool.reads == 2 and watch.last_count == 0


async def test_an_outage_is_not_no_worker_and_the_workers_get_a_window_to_beat_again() -> None:
    clock, pool = FakeClock(), Pool()
    watch = WorkerWatch(pool.count, WINDOW_S, monotonic=clock)
    pool.live = RedisConnectionError("Redis is down")
    await watch.require()  # unknown: not refused
    assert watch.last_count is None
    pool.live = 0  # Redis is back, and no beat landed meanwhile
    clock.advance(WINDOW_S - 1)
    await watch.require()
    clock.advance(1)
    with pytest.raises(NoWorker):
        await watch.require()


async def test_a_window_of_zero_never_refuses_and_never_asks() -> None:
    pool = Pool()
    pool.live = 0
    watch = WorkerWatch(pool.count, 0)
    await watch.require()
    assert pool.reads == 0 and not watch.on
