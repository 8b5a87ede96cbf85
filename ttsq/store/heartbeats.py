"""Workers' heartbeats: who is alive in the pool, for readiness, metrics and the queue's wait estimates.

Each worker writes its record (:class:`ttsq.runtime.health.HeartbeatRecord`, as JSON) every
``HEARTBEAT_INTERVAL_S`` under a key on the home shard that expires after ``HEARTBEAT_TTL_S``, and the
time of its beat in every queue shard's :attr:`Keys.workers` sorted set (the enqueue script of each
shard spreads its wait estimate over the live workers it counts there). A worker counts as live while
its last beat is younger than the TTL. Every beat is timed by the shard's Redis clock
(:mod:`ttsq.store.clock`), so a worker on a host whose clock runs ahead or behind is neither counted
dead nor kept alive for it.
"""

from __future__ import annotations

import asyncio
import json
from importlib.resources import files
from typing import Any

from ttsq.store.clock import RedisClock, clock_lua
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Shards

FORGET_AFTER_TTLS = 10
"""A worker silent for this many TTLs leaves the set altogether (it stopped counting long before)."""


class Heartbeats:
    """The pool's heartbeats over one Redis connection pool; ``ttl_s`` is ``HEARTBEAT_TTL_S``."""

    def __init__(self, redis: RedisClient, shards: Shards, ttl_s: int, clock: RedisClock) -> None:
        self.redis = redis
        self.shards = shards
        self.keys = shards.home
        self.ttl_s = ttl_s
        self.clock = clock
        self._beat = redis.register_script(clock_lua() + "\n" + files("ttsq.store").joinpath("lua", "heartbeat.lua").read_text())

    async def write(self, worker_id: str, record: dict[str, Any]) -> None:
        """One beat: the worker's record (expiring after the TTL) and the time of its beat, on every shard."""
        record_json = json.dumps(record)
        forget_after = FORGET_AFTER_TTLS * self.ttl_s

        async def beat(index: int) -> None:
            keys = self.shards.all[index]
            declared = [keys.workers, keys.worker(worker_id)] if index == 0 else [keys.workers]
            await self._beat(keys=declared, args=[worker_id, self.clock.arg(), forget_after, record_json, self.ttl_s])

        await asyncio.gather(*(beat(index) for index in range(self.shards.count)))

    async def remove(self, worker_id: str) -> None:
        """A worker that stops says so at once, rather than counting as live for another TTL."""
        await self.redis.delete(self.keys.worker(worker_id))
        await asyncio.gather(*(self.redis.zrem(keys.workers, worker_id) for keys in self.shards.all))

    async def live_since(self) -> float:
        """The oldest beat that still counts as live (a score of the home shard's :attr:`Keys.workers`)."""
        return await self.clock.now() - self.ttl_s

    async def live_count(self) -> int:
        return int(await self.redis.zcount(self.keys.workers, await self.live_since(), "+inf"))

    async def stream_room(self) -> int | None:
        """Streams the live workers can still start real-time, summed from their records' ``stream_room``; None when
        none reports it (admission off)."""
        ids = await self.redis.zrangebyscore(self.keys.workers, await self.live_since(), "+inf")
        if not ids:
            return None
        names = [worker.decode() if isinstance(worker, bytes) else str(worker) for worker in ids]
        records = await self.redis.mget([self.keys.worker(name) for name in names])
        rooms = [json.loads(record).get("stream_room") for record in records if record]
        known = [room for room in rooms if isinstance(room, int)]
        return sum(known) if known else None
