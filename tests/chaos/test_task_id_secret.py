"""Regression for chaos scenario S3c: API replicas must keep agreeing on task ids after Redis lost its data.

Without ``TASK_ID_SECRET`` the replicas sign task ids with a random secret kept in Redis, and each
replica fetches it once. Found by the chaos suite: after a restart without persistence the secret
was gone, a replica started afterwards drew a new one, and each replica answered 404 for the
other's new tasks. A running replica now puts the secret it signs with back (on its next submit or
readiness check), so a later replica adopts it. Fast and in-process: the queue on the test Redis,
the data loss a FLUSHALL.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import FakeClock, params, task_id
from ttsq.store.queue import JobQueue
from ttsq.store.task_ids import TaskIdSigner


async def test_a_replica_started_after_redis_lost_the_secret_adopts_the_running_replicas(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    older: JobQueue = make_queue()
    old_signer = TaskIdSigner(await older.shared_secret())
    await redis.flushall()  # Redis restarted without persistence
    clock.advance(5)
    await older.enqueue(task_id(), params("a submit to the older replica"), single_flight=False)
    later: JobQueue = make_queue()
    new_signer = TaskIdSigner(await later.shared_secret())
    assert new_signer.verify(old_signer.new()) and old_signer.verify(new_signer.new())


async def test_the_readiness_check_restores_the_secret_too(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    older: JobQueue = make_queue()
    secret = await older.shared_secret()
    await redis.flushall()
    clock.advance(5)
    await older.ping()
    assert await redis.get(older.keys.task_id_secret) == secret


async def test_a_replica_without_the_shared_secret_never_writes_one(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    """A replica with TASK_ID_SECRET configured never asks for the shared secret, and must not create one."""
    queue: JobQueue = make_queue()
    clock.advance(5)
    await queue.enqueue(task_id(), params("configured secret"), single_flight=False)
    await queue.ping()
    assert await redis.get(queue.keys.task_id_secret) is None
