"""Workers' heartbeats: who is alive in the pool, for the sweep, readiness, metrics and the queue's wait estimates.

Each worker beats every ``HEARTBEAT_INTERVAL_S``: its record (:class:`ttsq.runtime.health.HeartbeatRecord`, as JSON)
under a key on the home shard that expires after ``HEARTBEAT_TTL_S``, and the time of its beat in every queue shard's
:attr:`Keys.workers` sorted set (the enqueue script of each shard spreads its wait estimate over the live workers it
counts there). A worker counts as live while its last beat is younger than the TTL; once it is older, the worker is
dead for the queue too: the next sweep takes back the jobs it claimed (:attr:`Keys.worker_jobs`, ``sweep.lua``), a few
seconds after its death instead of a lease after. Liveness is apart from the lease: a beat is one small script per
shard, whatever the worker holds, and a worker whose model is busy with a long step still beats from its event loop,
so it keeps its jobs; the lease (``LEASE_S``) stays the backstop for a worker that still beats but no longer renews.

The heartbeat is fenced as leases are: when the sweep takes a worker's claims back it writes the shard's claims
counter under the worker's name (:attr:`Keys.fences`), and the worker's next beat reads it (:class:`Beat`) and drops
every job it holds there under a claim up to that number — work whose writes the claims' fencing tokens would refuse
anyway. Every beat is timed by the shard's Redis clock (:mod:`ttsq.store.clock`), so a worker on a host whose clock
runs ahead or behind is neither counted dead nor kept alive for it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from ttsq.store.clock import RedisClock, clock_lua
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys, Shards
from ttsq.store.replies import Beat

FORGET_AFTER_TTLS = 10
"""A worker silent for this many TTLs leaves the set altogether (it stopped counting long before)."""


@dataclass(frozen=True)
class Beats:
    """What one heartbeat (one script per shard) found."""

    fences: dict[str, int]
    """By shard (:attr:`Keys.prefix`), the fence of each shard where the sweep took this worker's claims back while its
    beats had lapsed: every claim it holds there with a token up to that number is no longer its own."""
    failures: list[Exception]
    """Why the beat did not reach some shards (a Redis error each): the caller reports them after acting on the fences."""


class Heartbeats:
    """The pool's heartbeats over one Redis connection pool; ``ttl_s`` is ``HEARTBEAT_TTL_S``."""

    def __init__(self, redis: RedisClient, shards: Shards, ttl_s: float, clock: RedisClock) -> None:
        self.redis = redis
        self.shards = shards
        self.keys = shards.home
        self.ttl_s = ttl_s
        self.clock = clock
        self._beat = redis.register_script(clock_lua() + "\n" + files("ttsq.store").joinpath("lua", "heartbeat.lua").read_text())

    async def write(self, worker_id: str, record: dict[str, Any]) -> Beats:
        """One beat: the worker's record (expiring after the TTL) and the time of its beat, on every shard; the fences it
        found, and the shards it could not reach (a beat reads and clears a fence: one found on a shard that answered is
        handed back even when another failed, or the worker would never learn of it)."""
        record_json = json.dumps(record)
        replies = await asyncio.gather(
            *(self._on(keys, worker_id, record_json, retire=False) for keys in self.shards.all), return_exceptions=True
        )
        fences: dict[str, int] = {}
        failures: list[Exception] = []
        for keys, reply in zip(self.shards.all, replies, strict=True):
            if isinstance(reply, Beat):
                if reply.fence is not None:
                    fences[keys.prefix] = reply.fence
            elif isinstance(reply, Exception):
                failures.append(reply)
            else:
                raise reply
        return Beats(fences, failures)

    async def remove(self, worker_id: str) -> None:
        """A worker that stops says so at once, rather than counting as live for another TTL: its record goes, and its
        beat is marked lapsed on every shard, so the next sweep takes back whatever it left in hand."""
        await asyncio.gather(*(self._on(keys, worker_id, "", retire=True) for keys in self.shards.all))

    async def _on(self, keys: Keys, worker_id: str, record_json: str, *, retire: bool) -> Beat:
        declared = [keys.workers, keys.beats_since, keys.fences]
        if keys is self.keys:
            declared.append(keys.worker(worker_id))
        forget_after = FORGET_AFTER_TTLS * self.ttl_s
        args: list[Any] = [worker_id, self.clock.arg(), forget_after, record_json, self.ttl_s, "1" if retire else "0"]
        return Beat.parse(await self._beat(keys=declared, args=args))

    async def live_since(self) -> float:
        """The oldest beat that still counts as live (a score of the home shard's :attr:`Keys.workers`)."""
        return await self.clock.now() - self.ttl_s

    async def live_count(self) -> int:
        return int(await self.redis.zcount(self.keys.workers, await self.live_since(), "+inf"))

    async def stream_room(self) -> int | None:
        """The live workers' stream room: streams they can still start real-time, summed from their records'
        ``stream_room`` (:mod:`ttsq.runtime.stream_admission` writes it); None when none reports it (stream admission
        off)."""
        ids = await self.redis.zrangebyscore(self.keys.workers, await self.live_since(), "+inf")
        if not ids:
            return None
        names = [worker.decode() if isinstance(worker, bytes) else str(worker) for worker in ids]
        records = await self.redis.mget([self.keys.worker(name) for name in names])
        rooms = [json.loads(record).get("stream_room") for record in records if record]
        known = [room for room in rooms if isinstance(room, int)]
        return sum(known) if known else None
