"""Regression for chaos scenario S3c: API replicas must keep agreeing on task ids after Redis lost its data.

Without ``TASK_ID_SECRET`` the replicas sign task ids with a random secret kept in Redis, and each
replica fetches it once. Found by the chaos suite: after a restart without persistence the secret
was gone, a replica started afterwards drew a new one, and each replica answered 404 for the
other's new tasks. A running replica now puts the secret it signs with back (on its next submit or
readiness check), so a later replica adopts it. Fast and in-process: each replica is the API's use
cases (:class:`ttsq.api.service.TTSService`: every use case's service) on the test Redis and clock, the data loss a FLUSHALL.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from settings import Settings
from tests.conftest import FakeClock
from ttsq.api.auth import Principal
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import TTSService
from ttsq.store.cache import ResultCache
from ttsq.store.task_ids import TaskIdSigner
from ttsq.store.voices import VoiceRegistry

ANONYMOUS = Principal(None, "127.0.0.1")


def replica(make_queue: Any, config: Settings, signer: TaskIdSigner | None = None) -> TTSService:
    """An API replica; without ``signer`` (TASK_ID_SECRET) it signs with the secret shared in Redis."""
    queue = make_queue()
    voices = VoiceRegistry(queue.redis, queue.keys, config.expected_speaker_dim())
    return TTSService(queue, ResultCache(queue.redis, config.cache_config()), voices, config.service_config(), signer)


async def test_a_replica_started_after_redis_lost_the_secret_adopts_the_running_replicas(
    make_queue: Any, make_settings: Any, redis: Redis, clock: FakeClock
) -> None:
    older = replica(make_queue, make_settings())
    old_signer = await older.common.signer()
    await redis.flushall()  # Redis restarted without persistence
    clock.advance(5)
    await older.tasks.submit(SubmitRequest(text="a submit to the older replica"), ANONYMOUS)
    later = replica(make_queue, make_settings())
    new_signer = await later.common.signer()
    assert new_signer.verify(old_signer.new()) and old_signer.verify(new_signer.new())


async def test_the_readiness_check_restores_the_secret_too(
    make_queue: Any, make_settings: Any, redis: Redis, clock: FakeClock
) -> None:
    older = replica(make_queue, make_settings())
    await older.common.signer()
    secret = await redis.get(older.tasks.queue.keys.task_id_secret)
    await redis.flushall()
    clock.advance(5)
    await older.admin.readiness()
    assert secret is not None and await redis.get(older.tasks.queue.keys.task_id_secret) == secret


async def test_a_replica_without_the_shared_secret_never_writes_one(
    make_queue: Any, make_settings: Any, redis: Redis, clock: FakeClock
) -> None:
    """A replica with TASK_ID_SECRET configured never asks for the shared secret, and must not create one."""
    configured = replica(make_queue, make_settings(), TaskIdSigner(b"a configured task-id secret"))
    clock.advance(5)
    await configured.tasks.submit(SubmitRequest(text="configured secret"), ANONYMOUS)
    await configured.admin.readiness()
    assert await redis.get(configured.tasks.queue.keys.task_id_secret) is None
