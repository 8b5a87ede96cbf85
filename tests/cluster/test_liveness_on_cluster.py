"""Liveness and cancel notices on a real Redis Cluster (three masters, each with a replica), with three queue shards
on three masters: a dead worker's claims come back from every shard a heartbeat TTL after its death, each shard's
fence reaches it, and a running job's cancel is announced on its own shard's stream. Time is the test's
(:class:`tests.conftest.FakeClock`, pinning each master's clock in the scripts)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from tests.conftest import FakeClock, claimed, params, queue_config, settings, task_id
from ttsq.domain.jobs import Status
from ttsq.store.connection import RedisClient, create_redis
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.keys import Keys
from ttsq.store.local_topology import LocalCluster
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Cancelled, SweepReport

pytestmark = pytest.mark.e2e

TTL_S = 2


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[RedisClient]:
    redis = create_redis(settings(redis_url=cluster.url()).redis_config())
    assert isinstance(redis, RedisCluster)
    yield redis
    await redis.aclose()


def sharded(client: RedisClient, clock: FakeClock) -> tuple[JobQueue, Heartbeats]:
    """Three shards in a namespace of the test's own (the cluster is shared by the module), a lease of 30 s."""
    namespace = f"live{uuid.uuid4().hex[:8]}"
    config = queue_config(redis_namespace=namespace, queue_shards=3, lease_s=30.0, heartbeat_ttl_s=TTL_S, heartbeat_interval_s=0.5)
    queue = JobQueue(client, config, clock=clock)
    return queue, Heartbeats(client, queue.shards, TTL_S, queue.clock)


def on(keys: Keys) -> str:
    """A job id naming ``keys``'s shard (as the API's task ids do)."""
    return f"{task_id()}_{keys.label}" if keys.label else task_id()


async def sweep(queue: JobQueue) -> SweepReport:
    for keys in queue.shards.all:
        await queue.redis.delete(keys.sweep_lock)
    return await queue.leases.sweep(1.0, "sweeper")


async def test_a_dead_worker_s_claims_come_back_from_every_master(client: RedisClient, cluster: LocalCluster) -> None:
    clock = FakeClock()
    queue, beats = sharded(client, clock)
    assert len({cluster.owner(keys.queue).port for keys in queue.shards.all}) == 3, "each shard on its own master"
    ids = [on(keys) for keys in queue.shards.all for _ in range(3)]
    for job_id in ids:
        await queue.enqueue(job_id, params(), single_flight=False)
    await beats.write("sweeper", {})
    await beats.write("doomed", {})
    claims = [await claimed(queue, "doomed") for _ in ids]
    for _ in range(5):  # 2.5 s: the sweeper beats, the doomed worker does not
        clock.advance(0.5)
        await beats.write("sweeper", {})
    report = await sweep(queue)
    assert (report.abandoned, report.requeued) == (len(ids), 0)
    for job_id in ids:
        job = await queue.get(job_id)
        assert job is not None and job.status is Status.QUEUED and job.error is not None and "heartbeat" in job.error
    fences = (await beats.write("doomed", {})).fences
    assert all(claim.token <= fences[queue.shards.of(claim.job.id).prefix] for claim in claims)


async def test_a_running_job_s_cancel_is_announced_on_its_shard(client: RedisClient) -> None:
    queue, _ = sharded(client, FakeClock())
    keys = queue.shards.all[2]
    job_id = on(keys)
    await queue.enqueue(job_id, params(), single_flight=False)
    after = await queue.leases.last_cancel(keys)
    claim = await claimed(queue, "w~1")
    assert await queue.cancel(claim.job, None) is Cancelled.CANCELLING
    _, notices = await queue.leases.cancel_notices(keys, after, 0.1)
    assert [(n.job_id, n.worker, n.claim) for n in notices] == [(job_id, "w~1", claim.token)]
