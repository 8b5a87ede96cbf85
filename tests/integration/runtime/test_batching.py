"""Cross-request micro-batching in the worker, on the real tiny ChatTTS engine."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from ttsq.domain.batching import AdaptiveBatchLimit
from ttsq.domain.jobs import Status
from ttsq.inference.base import Batcher, Engine, EngineWrapper, SynthesisRequest
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.faults import FaultInjectingEngine


class RecordingEngine(EngineWrapper):
    """Delegates every call to the real engine and records the requests of each engine step (a spy, not a fake)."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.batches: list[list[SynthesisRequest]] = []

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        batcher = self.inner.batcher(slots, oom_recover_s=oom_recover_s)
        batcher.hook = lambda reqs: self.batches.append(list(reqs))
        return batcher


def test_adaptive_limit_halves_then_recovers() -> None:
    limit = AdaptiveBatchLimit(max_batch=8, recover_after_s=60)
    assert limit.current(now=0) == 8
    assert limit.shrink(8, now=0) == 4
    assert limit.shrink(4, now=1) == 2
    assert limit.current(now=30) == 2
    assert limit.current(now=62) == 8
    assert limit.shrink(1, now=70) == 1


async def enqueue_all(redis: Redis, jobs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    from ttsq.store.queue import JobQueue

    queue = JobQueue(redis, queue_config())
    ids = []
    for text, overrides in jobs:
        job_id = task_id()
        await queue.enqueue(job_id, params(text, **overrides), single_flight=False)
        ids.append(job_id)
    return ids


async def test_compatible_jobs_share_one_call_and_keep_their_own_voice(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    spy = RecordingEngine(tiny_engine)
    work = [(f"Sentence number {n}.", {"speaker_seed": 1 + n % 2, "seed": 100 + n}) for n in range(6)]
    ids = await enqueue_all(redis, work)
    async with running_worker(redis, spy, max_batch=8, batch_wait_ms=50) as worker:
        finals = [await wait_final(worker.queue, job_id) for job_id in ids]
        assert all(f.status is Status.DONE for f in finals), [f.error for f in finals]
        assert worker.record.largest_batch == 3
    real = [b for b in spy.batches if b[0].text != tiny_engine.config.warmup_text]
    assert sorted(len(b) for b in real) == [3, 3]
    for batch in real:
        assert len({req.speaker for req in batch}) == 1, "a batch never mixes voices"
    speakers = {tiny_engine.speaker_from_seed(1), tiny_engine.speaker_from_seed(2)}
    assert {batch[0].speaker for batch in real} == speakers


async def test_one_failing_job_does_not_fail_its_batch(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    engine = FaultInjectingEngine(tiny_engine, fault_config("raise", "BOOM"))
    ids = await enqueue_all(
        redis, [(text, {"seed": n}) for n, text in enumerate(["Fine one.", "BOOM here.", "Fine two.", "Fine three."])]
    )
    config = queue_config(block_s=0.2, max_attempts=1)
    async with running_worker(redis, engine, config, max_batch=8, batch_wait_ms=50) as worker:
        finals = {job_id: await wait_final(worker.queue, job_id) for job_id in ids}
    assert [finals[i].status for i in ids] == [Status.DONE, Status.FAILED, Status.DONE, Status.DONE]
    assert "injected fault" in (finals[ids[1]].error or "")


async def test_out_of_memory_splits_the_batch_and_remembers_a_smaller_size(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    engine = FaultInjectingEngine(tiny_engine, fault_config("oom", "", oom_above_batch=2))
    ids = await enqueue_all(redis, [(f"Job {n}.", {"seed": n}) for n in range(8)])
    async with running_worker(redis, engine, max_batch=8, batch_wait_ms=50) as worker:
        finals = [await wait_final(worker.queue, job_id) for job_id in ids]
        assert all(f.status is Status.DONE and f.attempts == 1 for f in finals), [f.error for f in finals]
        assert worker.batch_limit == 2
        assert worker.record.largest_batch == 2
