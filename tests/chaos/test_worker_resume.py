"""Regression for chaos scenario S3: a worker resumes as soon as Redis is back, not when its backoff ends.

Found by the chaos suite's Redis restart: the worker's claim loop (and its retries to store a finished
result) back off exponentially up to 10 s while Redis is down, and slept the whole pause even when
Redis came back in the middle of it, so after a long outage a worker could sit idle for up to 10 s —
against the promise that workers resume within 5 s without a restart. The pause now ends when the
upkeep's heartbeat (or any Redis call) succeeds again.

In-process and deterministic: a real redis-server of the test's own is stopped and started again on
its port; the backoff is set to an hour, so only an early wake can end it within the test's timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import queue_config, settings, task_id
from tests.support.redis_server import free_port
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.runtime.worker import Worker
from ttsq.store.local_redis import RedisServer, start_redis_server
from ttsq.store.queue import JobQueue

HOUR_S = 3600.0


@pytest.fixture
async def own_redis(tmp_path: Path) -> AsyncIterator[tuple[RedisServer, Redis]]:
    server = start_redis_server(tmp_path / "redis")
    client = Redis.from_url(server.url, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        yield server, client
    finally:
        await client.aclose()
        server.stop()


def idle_worker(client: Redis) -> Worker:
    """A worker whose engine is never loaded: the claim loop and the upkeep are all this test runs."""
    config = settings(
        worker_id=f"resume-{task_id()[:8]}", heartbeat_interval_s=0.2, sweep_interval_s=0.2, worker_health_port=free_port()
    )
    return Worker(JobQueue(client, queue_config(block_s=0.2)), ChatTTSEngine(config.engine_config()), config.worker_config())


async def test_a_claim_loop_deep_in_its_backoff_resumes_once_redis_is_back(own_redis: tuple[RedisServer, Any]) -> None:
    server, client = own_redis
    worker = idle_worker(client)
    server.process.kill()
    server.process.wait()
    worker.outage.backoff_s = HOUR_S  # an outage long enough to have grown the pause far past any timeout here
    claim = asyncio.create_task(worker.claims.take(1))
    for _ in range(1200):  # until the claim has failed and the loop is pausing
        if not worker.record.redis_ok:
            break
        await asyncio.sleep(0.05)
    assert not worker.record.redis_ok, "the claim never noticed that Redis is down"
    server.restart()
    worker.upkeep.start()  # its heartbeat is what sees Redis back
    try:
        assert await asyncio.wait_for(claim, 60) == []
        assert worker.record.redis_ok
    finally:
        await worker.upkeep.stop(10)
