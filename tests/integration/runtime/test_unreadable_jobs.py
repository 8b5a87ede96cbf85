"""A job record the worker cannot read, claimed by a real worker (the tiny ChatTTS engine, a real Redis): the job
fails for good with why, through the queue's one failure path, and the worker serves on — alone or in a batch.

The record is rewritten straight in Redis before the worker starts, as a newer API writing into the same Redis would
leave it: its parameters hold a seed of a type this release does not take.
"""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from tests.conftest import queue_config, task_id
from tests.integration.api.test_metrics import samples, value
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from ttsq.domain.jobs import Job, Status
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.queue import JobQueue

OWNER = "key:newer"
WHY = "the job record could not be read: params.seed: "


async def written_by_a_newer_release(redis: Redis, queue: JobQueue, job_id: str) -> None:
    key = queue.keys.job(job_id)
    record = json.loads(await redis.get(key) or b"{}")
    record["params"]["seed"] = {"draw": 7}
    await redis.set(key, json.dumps(record))


async def test_a_job_whose_record_does_not_load_fails_with_why_and_the_worker_serves_on(
    redis: Redis, tiny_engine: ChatTTSEngine
) -> None:
    config = queue_config(block_s=0.2, max_attempts=3)
    queue = JobQueue(redis, config)
    bad = task_id()
    await queue.enqueue(bad, params(callback_url="https://hooks.example/done"), single_flight=False, owner=OWNER, max_per_owner=5)
    await written_by_a_newer_release(redis, queue, bad)
    async with running_worker(redis, tiny_engine, config) as worker:
        failed = await wait_final(queue, bad, 30)
        assert failed.status is Status.FAILED and failed.attempts == 1, "failed for good, not retried"
        assert failed.error is not None and failed.error.startswith(WHY), failed.error
        good = task_id()
        await queue.enqueue(good, params("Served after it."), single_flight=False, owner=OWNER, max_per_owner=5)
        assert (await wait_final(queue, good, 30)).status is Status.DONE, "the worker stopped serving"
        scrape = samples(worker.metrics.exposition().decode())
        assert worker.record.jobs_failed == 1 and value(scrape, "ttsq_jobs_total", outcome="failed", attempt="1") == 1
    assert await redis.get(queue.keys.owner_jobs(OWNER)) is None, "its owner's count was not released"
    entries: Any = await redis.xrange(queue.keys.stream(bad))
    assert entries[-1][1] == {b"end": b"failed"}, "its stream has no end marker"
    assert bad.encode() in await redis.lrange(queue.keys.deliveries, 0, -1), "its webhook was not queued"
    assert [letter.id for letter in await DeadLetters(queue).newest()] == [bad]


async def test_an_unreadable_job_claimed_with_good_ones_fails_alone(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    """The worker's first claim takes one job, the next takes the other three in one script: those three share the
    claim's ``started_at``, so the unreadable one was claimed with two good ones."""
    config = queue_config(block_s=0.2)
    queue = JobQueue(redis, config)
    ids = [task_id() for _ in range(4)]
    for number, job_id in enumerate(ids):
        await queue.enqueue(job_id, params(f"Batch mate number {number}."), single_flight=False)
    await written_by_a_newer_release(redis, queue, ids[2])
    async with running_worker(redis, tiny_engine, config, max_batch=4, batch_wait_ms=200):
        ended: list[Job] = [await wait_final(queue, job_id, 30) for job_id in ids]
    assert [job.status for job in ended] == [Status.DONE, Status.DONE, Status.FAILED, Status.DONE]
    assert ended[2].error is not None and ended[2].error.startswith(WHY)
    assert ended[1].started_at == ended[2].started_at == ended[3].started_at, "not claimed in one batch"
