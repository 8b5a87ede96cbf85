"""Workers' heartbeats: who is alive in the pool, for readiness, metrics and the queue's wait estimates.

Each worker writes its record (:class:`ttsq.runtime.health.HeartbeatRecord`, as JSON) every
``HEARTBEAT_INTERVAL_S`` under a key that expires after ``HEARTBEAT_TTL_S``, and its last beat's time
in the :attr:`Keys.workers` sorted set. A worker counts as live while its last beat is younger than the
TTL; the scripts that queue jobs read the same set (``enqueue.lua`` spreads its wait estimate over the
live workers). Every beat is timed by Redis's clock (:mod:`ttsq.store.clock`), so a worker on a host
whose clock runs ahead or behind is neither counted dead nor kept alive for it.
"""

from __future__ import annotations

import json
from typing import Any

from ttsq.store.clock import RedisClock
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

FORGET_AFTER_TTLS = 10
"""A worker silent for this many TTLs leaves the set altogether (it stopped counting long before)."""


class Heartbeats:
    """The pool's heartbeats over one Redis connection pool; ``ttl_s`` is ``HEARTBEAT_TTL_S``."""

    def __init__(self, redis: RedisClient, keys: Keys, ttl_s: int, clock: RedisClock) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self.clock = clock

    async def write(self, worker_id: str, record: dict[str, Any]) -> None:
        """One beat: the worker's record (expiring after the TTL) and the time of its beat."""
        now = await self.clock.now()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.worker(worker_id), json.dumps(record), ex=self.ttl_s)
            pipe.zadd(self.keys.workers, {worker_id: now})
            pipe.zremrangebyscore(self.keys.workers, "-inf", now - FORGET_AFTER_TTLS * self.ttl_s)
            await pipe.execute()

    async def remove(self, worker_id: str) -> None:
        """A worker that stops says so at once, rather than counting as live for another TTL."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.worker(worker_id))
            pipe.zrem(self.keys.workers, worker_id)
            await pipe.execute()

    async def live_since(self) -> float:
        """The oldest beat that still counts as live (a score of :attr:`Keys.workers`)."""
        return await self.clock.now() - self.ttl_s

    async def live_count(self) -> int:
        return int(await self.redis.zcount(self.keys.workers, await self.live_since(), "+inf"))
