"""Fair queuing on a real Redis Cluster with three queue shards on three masters (docs/fairness.md): every script of
the round robin declares the keys it touches, so it runs under the cluster's rules, and each shard is fair on its own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from tests.conftest import params, settings
from ttsq.store.connection import RedisClient, create_redis
from ttsq.store.local_topology import LocalCluster
from ttsq.store.queue import JobQueue

pytestmark = pytest.mark.e2e

SHARDS = 3


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[RedisClient]:
    redis = create_redis(settings(redis_url=cluster.url()).redis_config())
    assert isinstance(redis, RedisCluster)
    yield redis
    await redis.aclose()


async def test_a_backlog_on_every_shard_is_overtaken_within_two_claims_per_shard(client: RedisClient) -> None:
    """Key A queues 300 jobs over three shards, then key B one: B's job is among the next 2 x 3 claims (a worker
    claims from every shard in turn, and each shard's round robin gives B the next turn after A's)."""
    queue = JobQueue(client, settings(queue_shards=SHARDS).queue_config())
    for n in range(300):
        shard = queue.shards.place(f"a-{n}")
        job_id = f"{uuid.uuid4()}_{shard.label}" if shard.label else str(uuid.uuid4())
        await queue.enqueue(job_id, params(f"a {n}"), single_flight=False, tenant="A")
    late = f"{uuid.uuid4()}_{queue.shards.all[1].label}"
    await queue.enqueue(late, params("b"), single_flight=False, tenant="B")
    assert await queue.depth() == 301
    taken = []
    for _ in range(2 * SHARDS):
        claim = await queue.leases.claim("w", block_s=0.1)
        assert claim is not None
        taken.append(claim.job.id)
        await queue.leases.complete(claim.job, b"audio", "audio/wav", 1.0, 0.1, cache_key=None)
    assert late in taken
    job = await queue.get(taken[-1])
    assert job is not None and job.status.value == "done"
    assert await queue.depth() == 301 - 2 * SHARDS
