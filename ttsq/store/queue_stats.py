"""What is counted of the job queue, never written: the wait estimate an enqueue answers with, and the snapshot and
per-tenant depths the metrics read (summed over the shards). The protocol that moves jobs is :mod:`ttsq.store.queue`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ttsq.domain.jobs import LANES, Lane
from ttsq.store.connection import RedisClient
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.keys import Keys, Shards
from ttsq.store.replies import text

DEFAULT_JOB_S = 5.0
"""The wait estimate per job before any job has finished."""


@dataclass(frozen=True)
class QueueSnapshot:
    """How the pool stands, in one round trip per shard (for metrics): totals over every shard."""

    queued: int
    processing: int
    delayed: int
    dead_letters: int
    live_workers: int
    queued_by_shard: tuple[int, ...] = ()
    """Jobs waiting on each shard, shard 0 first (how evenly the load spreads)."""


def estimate_s(position: int, average_job_s: float, live_workers: int, shards: int = 1) -> float:
    """Seconds until the job at ``position`` of its shard is done: workers claim from every shard in turn, so each
    shard gets a ``1/shards`` share of them."""
    return round((position + 1) * average_job_s * shards / max(1, live_workers), 1)


class QueueStats:
    """Reads of a queue's keys on every shard, for estimates and metrics."""

    def __init__(self, redis: RedisClient, shards: Shards, heartbeats: Heartbeats) -> None:
        self.redis = redis
        self.shards = shards
        self.keys = shards.home
        self._heartbeats = heartbeats
        """How many workers share the queue (the estimate), and since when a heartbeat counts as live (the snapshot)."""

    async def estimate_wait_s(self, position: int, keys: Keys | None = None) -> float:
        """Rough seconds until a job at ``position`` of a shard's queue is done: the shard's average job time,
        spread over its share of the live workers."""
        jobs, busy = await self.redis.hmget((keys or self.keys).stats, ["jobs", "busy_s"])
        average = float(busy or 0) / int(jobs) if jobs and int(jobs) else DEFAULT_JOB_S
        return estimate_s(position, average, await self._heartbeats.live_count(), self.shards.count)

    async def snapshot(self) -> QueueSnapshot:
        """Queue depth, claimed jobs, retries waiting, dead letters (summed over the shards) and live workers."""
        live_since = await self._heartbeats.live_since()

        async def one(keys: Keys) -> list[Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.llen(keys.queue)
                pipe.llen(keys.processing)
                pipe.zcard(keys.delayed)
                pipe.llen(keys.dead)
                result: list[Any] = await pipe.execute()
            return result

        shards = await asyncio.gather(*(one(keys) for keys in self.shards.all))
        workers = await self.redis.zcount(self.keys.workers, live_since, "+inf")
        queued, processing, delayed, dead = (sum(int(shard[n]) for shard in shards) for n in range(4))
        by_shard = tuple(int(shard[0]) for shard in shards)
        return QueueSnapshot(queued, processing, delayed, dead, int(workers), by_shard)

    async def tenant_depths(self) -> dict[tuple[str, Lane], int]:
        """Jobs waiting per (tenant, lane), summed over the shards: every tenant in a ring, then its queue's length
        (two round trips per shard, O(tenants waiting); for metrics)."""
        depths: dict[tuple[str, Lane], int] = {}
        for keys in self.shards.all:
            async with self.redis.pipeline(transaction=False) as pipe:
                for lane in LANES:
                    pipe.lrange(keys.ring(lane), 0, -1)
                rings: list[list[bytes]] = await pipe.execute()
            waiting = [(text(tenant), lane) for lane, ring in zip(LANES, rings, strict=True) for tenant in ring]
            async with self.redis.pipeline(transaction=False) as pipe:
                for tenant, lane in waiting:
                    pipe.llen(keys.tenant_queue(lane, tenant))
                lengths: list[int] = await pipe.execute()
            for place, length in zip(waiting, lengths, strict=True):
                depths[place] = depths.get(place, 0) + int(length)
        return depths
