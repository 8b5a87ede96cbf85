"""Prometheus views of the store: the result cache's counters, and the queue as it stands.

Both are read when Prometheus scrapes, not on every request: the cache's counters already live in
:class:`ttsq.store.cache.CacheStats`, and the queue's state is one pipelined round trip to Redis
with a short timeout. A scrape never fails because Redis is down: ``ttsq_redis_up`` says 0 and the
queue gauges keep their last values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ttsq.domain.jobs import Lane
from ttsq.store.cache import LEVELS, ResultCache
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.queue import JobQueue


class CacheCollector(Collector):
    """``ttsq_cache_*``: lookups by level and result, writes, evictions and current size per level."""

    def __init__(self, cache: ResultCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        stats = self.cache.stats
        lookups = CounterMetricFamily(
            "ttsq_cache_lookups",
            "Result-cache lookups by level and result (a miss falls through to the next level).",
            labels=["level", "result"],
        )
        puts = CounterMetricFamily("ttsq_cache_puts", "Entries written to each cache level.", labels=["level"])
        for level in LEVELS:
            lookups.add_metric([level, "hit"], stats.hits[level])
            lookups.add_metric([level, "miss"], stats.misses[level])
            puts.add_metric([level], stats.puts[level])
        evictions = CounterMetricFamily(
            "ttsq_cache_evictions", "Entries evicted to stay within the size bound (L2 expires by TTL instead).", labels=["level"]
        )
        size = GaugeMetricFamily(
            "ttsq_cache_bytes", "Bytes held by the in-process (l1) and disk (l3) cache levels.", labels=["level"]
        )
        evictions.add_metric(["l1"], self.cache.l1.evictions)
        size.add_metric(["l1"], self.cache.l1.bytes)
        if self.cache.l3 is not None:
            evictions.add_metric(["l3"], self.cache.l3.evictions)
            size.add_metric(["l3"], self.cache.l3.bytes)
        yield from (lookups, puts, evictions, size)


TOP_TENANTS = 10
"""Tenants named in ``ttsq_tenant_queue_depth``; the others are summed as ``other``."""


def top_tenants(depths: Mapping[tuple[str, Lane], int], limit: int) -> dict[tuple[str, Lane], int]:
    """The ``limit`` tenants with the most jobs waiting (over every lane) keep their name; the rest are summed per
    lane as ``other``, so the gauge's series stay bounded whatever the number of keys."""
    totals: dict[str, int] = {}
    for (tenant, _lane), depth in depths.items():
        totals[tenant] = totals.get(tenant, 0) + depth
    named = set(sorted(totals, key=lambda tenant: (-totals[tenant], tenant))[:limit])
    shown: dict[tuple[str, Lane], int] = {}
    for (tenant, lane), depth in depths.items():
        place = (tenant if tenant in named else "other", lane)
        shown[place] = shown.get(place, 0) + depth
    return shown


class QueueGauges:
    """``ttsq_queue_*``, ``ttsq_workers_live`` and ``ttsq_redis_up``, refreshed from Redis before each scrape."""

    def __init__(self, registry: CollectorRegistry, queue: JobQueue, timeout_s: float) -> None:
        self.queue = queue
        self.timeout_s = timeout_s
        self.depth = Gauge("ttsq_queue_depth", "Jobs waiting in the queue (every shard).", registry=registry)
        self.shard_depth = Gauge(
            "ttsq_queue_shard_depth",
            "Jobs waiting in each queue shard (QUEUE_SHARDS; 0 is the home shard).",
            ["shard"],
            registry=registry,
        )
        self.tenant_depth = Gauge(
            "ttsq_tenant_queue_depth",
            f"Jobs waiting per tenant and priority lane: the {TOP_TENANTS} tenants with the most waiting by name, the rest "
            "summed as 'other' (bounded cardinality; docs/fairness.md).",
            ["tenant", "priority"],
            registry=registry,
        )
        self.depth_limit = Gauge("ttsq_queue_depth_limit", "MAX_QUEUE_DEPTH: submits get 429 at this depth.", registry=registry)
        self.processing = Gauge("ttsq_jobs_processing", "Jobs claimed by a worker and not finished.", registry=registry)
        self.delayed = Gauge("ttsq_jobs_retry_waiting", "Failed attempts waiting out their retry backoff.", registry=registry)
        self.dead = Gauge("ttsq_dead_letters", "Jobs in the dead-letter list (capped at DEAD_LETTER_MAX).", registry=registry)
        self.workers = Gauge("ttsq_workers_live", "Workers whose heartbeat is fresher than HEARTBEAT_TTL_S.", registry=registry)
        self.redis_up = Gauge("ttsq_redis_up", "1 when the last scrape could read the queue's Redis, else 0.", registry=registry)
        self.depth_limit.set(queue.config.max_queue_depth)

    async def refresh(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                snapshot = await self.queue.stats.snapshot()
        except (*STORE_ERRORS, OSError, TimeoutError):
            self.redis_up.set(0)
            return
        self.redis_up.set(1)
        self.depth.set(snapshot.queued)
        for index, queued in enumerate(snapshot.queued_by_shard):
            self.shard_depth.labels(str(index)).set(queued)
        self.processing.set(snapshot.processing)
        self.delayed.set(snapshot.delayed)
        self.dead.set(snapshot.dead_letters)
        self.workers.set(snapshot.live_workers)
        try:
            async with asyncio.timeout(self.timeout_s):
                depths = await self.queue.stats.tenant_depths()
        except (*STORE_ERRORS, OSError, TimeoutError):
            return
        self.tenant_depth.clear()
        for (tenant, priority), depth in top_tenants(depths, TOP_TENANTS).items():
            self.tenant_depth.labels(tenant, priority).set(depth)
