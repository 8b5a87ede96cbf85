"""The worker loop in-process: the real tiny ChatTTS engine, a real Redis, the real health server."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import soundfile as sf
from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, settings, task_id
from tests.support.redis_proxy import RedisProxy, redis_proxy
from tests.support.redis_server import RedisServer, free_port
from ttsq.domain.jobs import Job, Status, TTSParams
from ttsq.inference.base import Engine
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.faults import FaultInjectingEngine
from ttsq.runtime.worker import Worker
from ttsq.runtime.worker_config import WorkerConfig
from ttsq.store.connection import create_redis
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue, QueueConfig
from ttsq.store.replies import Cancelled


async def wait_until(check: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def wait_final(queue: JobQueue, job_id: str, timeout_s: float = 60.0) -> Job:
    async def final() -> bool:
        job = await queue.get(job_id)
        return job is not None and job.status.is_final

    await wait_until(final, timeout_s)
    job = await queue.get(job_id)
    assert job is not None
    return job


def worker_config(**overrides: Any) -> WorkerConfig:
    """A worker's config from settings (their names: ``worker_health_port``, ``max_batch``, ...), with quick upkeep."""
    values: dict[str, Any] = {
        "worker_id": f"test-{task_id()[:8]}",
        "heartbeat_interval_s": 0.2,
        "sweep_interval_s": 0.2,
        "worker_health_port": free_port(),
    }
    return settings(**{**values, **overrides}).worker_config()


@asynccontextmanager
async def running_worker(
    redis: Redis, engine: Engine, queue: QueueConfig | None = None, **worker_settings: Any
) -> AsyncIterator[Worker]:
    worker = Worker(JobQueue(redis, queue or queue_config(block_s=0.2)), engine, worker_config(**worker_settings))
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: _true(worker.record.serving()), 120)
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30)


async def _true(value: bool) -> bool:
    return value


def params(text: str = "Hello from the worker.", **overrides: Any) -> TTSParams:
    values: dict[str, Any] = {"text": text, "speaker_seed": 11, "seed": 11}
    values.update(overrides)
    return TTSParams(**values)


async def test_worker_produces_decodable_24khz_audio_in_all_formats(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    async with running_worker(redis, tiny_engine) as worker:
        ids = {}
        for fmt in ("wav", "mp3", "ogg", "flac"):
            ids[fmt] = task_id()
            await worker.queue.enqueue(ids[fmt], params(format=fmt), single_flight=False)
        for fmt, job_id in ids.items():
            job = await wait_final(worker.queue, job_id)
            assert job.status is Status.DONE, job.error
            audio = await worker.queue.result(job_id)
            assert audio is not None
            samples, rate = sf.read(io.BytesIO(audio))
            assert rate == 24000, fmt
            assert len(samples) > 0 and job.duration_s is not None and job.duration_s > 0
        assert worker.record.jobs_done == 4


async def test_same_deterministic_request_gives_identical_audio(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    """Unbatched (MAX_BATCH=1): a batched job's prosody may depend on its neighbours, by design."""
    async with running_worker(redis, tiny_engine, max_batch=1) as worker:
        first, second, other = task_id(), task_id(), task_id()
        await worker.queue.enqueue(first, params(seed=5, speaker_seed=5), single_flight=False)
        await worker.queue.enqueue(second, params(seed=5, speaker_seed=5), single_flight=False)
        await worker.queue.enqueue(other, params(seed=6, speaker_seed=6), single_flight=False)
        for job_id in (first, second, other):
            assert (await wait_final(worker.queue, job_id)).status is Status.DONE
        assert await worker.queue.result(first) == await worker.queue.result(second)
        assert await worker.queue.result(first) != await worker.queue.result(other)


async def test_failing_job_retries_then_dead_letters_and_the_loop_goes_on(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    engine = FaultInjectingEngine(tiny_engine, fault_config("raise", "BOOM"))
    config = queue_config(block_s=0.2, max_attempts=2, retry_base_s=1.0)
    async with running_worker(redis, engine, config) as worker:
        bad, good = task_id(), task_id()
        await worker.queue.enqueue(bad, params("BOOM goes this one."), single_flight=False)
        await worker.queue.enqueue(good, params("This one is fine."), single_flight=False)
        assert (await wait_final(worker.queue, good)).status is Status.DONE
        failed = await wait_final(worker.queue, bad)
        assert failed.status is Status.FAILED and failed.attempts == 2
        assert failed.error is not None and "injected fault" in failed.error
        assert [job.id for job in await DeadLetters(worker.queue).newest()] == [bad]


async def test_out_of_memory_is_reported_as_such(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    engine = FaultInjectingEngine(tiny_engine, fault_config("oom", ""))
    async with running_worker(redis, engine, queue_config(block_s=0.2, max_attempts=1)) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(), single_flight=False)
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.FAILED and job.error is not None and job.error.startswith("out of memory")


async def test_hung_inference_turns_liveness_503_and_recovers(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    engine = FaultInjectingEngine(tiny_engine, fault_config("hang", "HANG"))
    port = free_port()
    async with (
        running_worker(redis, engine, worker_health_port=port, job_timeout_s=0.5) as worker,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        healthy = await http.get("/healthz")
        assert healthy.status_code == 200 and healthy.json()["redis"] == "ok"
        assert (await http.get("/readyz")).status_code == 200
        job_id = task_id()
        await worker.queue.enqueue(job_id, params("HANG here."), single_flight=False)

        async def unhealthy() -> bool:
            return (await http.get("/healthz")).status_code == 503

        await wait_until(unhealthy, 30)
        body = (await http.get("/healthz")).json()
        assert "hung" in body["reason"] and body["current_job"]["id"] == job_id
        engine.release()
        assert (await wait_final(worker.queue, job_id)).status is Status.DONE
        assert (await http.get("/healthz")).status_code == 200


async def test_heartbeat_is_visible_in_redis(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    async with running_worker(redis, tiny_engine) as worker:
        await wait_until(lambda: _count_is(worker.heartbeats, 1), 10)
        record = json.loads(await redis.get(worker.queue.keys.worker(worker.identity)) or b"{}")
        assert record["worker_id"] == worker.config.worker_id and record["model_loaded"]
    assert await worker.heartbeats.live_count() == 0, "a stopped worker removes its heartbeat"


async def _count_is(heartbeats: Heartbeats, expected: int) -> bool:
    return await heartbeats.live_count() == expected


async def test_metrics_on_the_health_port_follow_jobs_through_the_worker(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    from tests.integration.api.test_metrics import samples, value

    engine = FaultInjectingEngine(tiny_engine, fault_config("raise", "BOOM"))
    port = free_port()
    config = queue_config(block_s=0.2, max_attempts=2, retry_base_s=1.0)
    async with (
        running_worker(redis, engine, config, worker_health_port=port, max_batch=4, batch_wait_ms=50) as worker,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        good, bad = task_id(), task_id()
        await worker.queue.enqueue(good, params("Measured sentence."), single_flight=False)
        await worker.queue.enqueue(bad, params("BOOM measured."), single_flight=False)
        assert (await wait_final(worker.queue, good)).status is Status.DONE
        assert (await wait_final(worker.queue, bad)).status is Status.FAILED
        response = await http.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    scrape = samples(response.text)
    assert value(scrape, "ttsq_jobs_total", outcome="done", attempt="1") == 1
    assert value(scrape, "ttsq_jobs_total", outcome="retried", attempt="1") == 1
    assert value(scrape, "ttsq_jobs_total", outcome="failed", attempt="2") == 1
    assert value(scrape, "ttsq_queue_wait_seconds_count") == 2, "first attempts only"
    assert value(scrape, "ttsq_inference_seconds_count") >= 1, "engine calls that returned audio"
    assert value(scrape, "ttsq_real_time_factor_count") == 1 and value(scrape, "ttsq_time_to_first_audio_seconds_count") == 1
    assert value(scrape, "ttsq_audio_seconds_total") > 0
    assert value(scrape, "ttsq_batch_limit") == 4 and value(scrape, "ttsq_model_load_seconds") > 0
    assert value(scrape, "ttsq_worker_info", model="tiny-random", device="cpu") == 1
    assert 0 <= value(scrape, "ttsq_worker_loop_tick_age_seconds") < 60
    assert not any(name == "ttsq_gpu_memory_bytes" for name, _ in scrape), "a CPU worker exports no GPU memory"


@asynccontextmanager
async def proxied(redis_server: RedisServer) -> AsyncIterator[tuple[RedisProxy, Redis]]:
    """A client of ``redis_server`` through a fault-injecting proxy (:mod:`tests.support.redis_proxy`)."""
    async with redis_proxy(redis_server.port) as proxy:
        client = create_redis(settings(redis_url=proxy.url, redis_socket_timeout_s=2.0, block_s=0.2).redis_config())
        assert isinstance(client, Redis)
        try:
            yield proxy, client
        finally:
            await client.aclose()


async def test_a_result_redis_refuses_to_store_is_retried_and_the_worker_is_not_ready_meanwhile(
    redis_server: RedisServer, redis: Redis, tiny_engine: ChatTTSEngine
) -> None:
    """A result write that failed used to leave the worker holding the job while ``/readyz`` said 200. Now the write
    is retried until Redis takes it, and meanwhile the worker says it is not ready, and why."""
    port = free_port()
    job_id = task_id()
    async with (
        proxied(redis_server) as (proxy, client),
        running_worker(client, tiny_engine, worker_health_port=port) as worker,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        refused = worker.queue.keys.result(job_id).encode()  # only the completion names the result's key
        proxy.answer(refused, b"-OOM command not allowed when used memory > 'maxmemory'.\r\n")
        await worker.queue.enqueue(job_id, params("Refused at first."), single_flight=False)

        async def unready() -> bool:
            return (await http.get("/readyz")).status_code == 503

        await wait_until(unready, 60)
        body = (await http.get("/readyz")).json()
        assert body["storing"].startswith("cannot store job outcomes: OutOfMemoryError: "), body
        assert body["claiming"] == "ok", "claims work: what fails is storing"
        assert (await worker.queue.get(job_id)).status is Status.RUNNING  # type: ignore[union-attr]
        proxy.stop_answering(refused)
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.DONE and job.attempts == 1, "stored by the retry, not run again"
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["storing"] == "ok"
    assert len(proxy.answered) >= 1


async def test_an_outcome_that_cannot_be_stored_releases_the_job_to_run_again(
    redis_server: RedisServer, redis: Redis, tiny_engine: ChatTTSEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that failed with something other than a Redis outage (redis-py's own ``AttributeError`` mid
    slot move) used to kill the storing task and leave the job in the worker's hands, its lease renewed for as long as the
    worker lived. Here the completion gets a reply the worker cannot read: the job is released at once, as a retryable
    failure saying why, and its next attempt stores it."""
    job_id = task_id()
    config = queue_config(block_s=0.2, max_attempts=3, retry_base_s=1.0)
    async with proxied(redis_server) as (proxy, client), running_worker(client, tiny_engine, config) as worker:
        proxy.answer(worker.queue.keys.result(job_id).encode(), b"$7\r\nunknown\r\n", times=1)
        await worker.queue.enqueue(job_id, params("Unreadable the first time."), single_flight=False)
        job = await wait_final(worker.queue, job_id, 60)
        assert not worker._running, "nothing left in hand"
    assert len(proxy.answered) == 1
    assert job.status is Status.DONE and job.attempts == 2, (job.status, job.attempts, job.error)
    assert "storing its outcome failed; releasing it to run again" in caplog.text
    assert f"{job_id} attempt 1: storing its outcome failed: ValueError: " in caplog.text


async def test_a_cancel_reaches_the_engine_at_once_not_at_the_next_lease_renewal(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    """``LEASE_S=600``: renewals come every 200 s, so no renewal delivers this cancel. The job hangs in its first step;
    its cancel reaches the worker through the shard's cancels stream, which hands the job to the engine's cancel and
    ends it as cancelled while the step still hangs — the rows leave at the step's end, and nothing of the job is done."""
    engine = FaultInjectingEngine(tiny_engine, fault_config("hang", "HOLD", hang_s=600.0))
    async with running_worker(redis, engine, queue_config(block_s=0.2, lease_s=600.0)) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params("HOLD this sentence for a while."), single_flight=False)
        await wait_until(lambda: _true(worker.record.current_job is not None), 60)
        job = await worker.queue.get(job_id)
        assert job is not None and job.status is Status.RUNNING
        assert await worker.queue.cancel(job, None) is Cancelled.CANCELLING
        assert (await wait_final(worker.queue, job_id)).status is Status.CANCELLED
        assert worker.metrics.cancels.labels("notice")._value.get() == 1
        assert worker.metrics.cancels.labels("renewal")._value.get() == 0
        assert worker.metrics.cancel_latency._sum.get() >= 0 and worker.record.current_job is not None, "the step still hangs"
        engine.release()
        await wait_until(lambda: _true(worker.record.current_job is None), 60)
        assert worker.record.jobs_done == 0
