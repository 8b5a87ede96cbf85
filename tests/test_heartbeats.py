"""Workers' heartbeats against a real redis-server: who counts as live, and for how long.

Time is the test's (:class:`tests.conftest.FakeClock`, pinning the Redis clock the beats are timed by):
a heartbeat ages out exactly when the test advances the clock past ``HEARTBEAT_TTL_S``.
"""

from __future__ import annotations

import json

from redis.asyncio import Redis

from tests.conftest import FakeClock, queue_config
from ttsq.store.clock import RedisClock
from ttsq.store.heartbeats import FORGET_AFTER_TTLS, Heartbeats
from ttsq.store.keys import Shards


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
