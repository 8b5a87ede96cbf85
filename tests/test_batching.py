"""Cross-request micro-batching in the worker, on the real tiny ChatTTS engine."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.test_worker import params, running_worker, wait_final
from ttsq.domain.batching import AdaptiveBatchLimit, group_compatible, halves, slices
from ttsq.domain.jobs import Job, Status
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


def job(text: str, **overrides: Any) -> Job:
    return Job(id=task_id(), params=params(text, **overrides), created_at=0.0, max_attempts=3)


def test_jobs_are_grouped_by_speaker_and_sampling_parameters() -> None:
    a1, a2 = job("one", speaker_seed=1, seed=10), job("two", speaker_seed=1, seed=11)
    b = job("three", speaker_seed=2, seed=10)
    fast = job("four", speaker_seed=1, speed=7)
    hot = job("five", speaker_seed=1, temperature=0.9)
    chinese = job("你好", speaker_seed=1)
    groups = group_compatible([a1, b, a2, fast, hot, chinese])
    assert [[j.id for j in g] for g in groups] == [[a1.id, a2.id], [b.id], [fast.id], [hot.id], [chinese.id]]


def test_adaptive_limit_halves_then_recovers() -> None:
    limit = AdaptiveBatchLimit(max_batch=8, recover_after_s=60)
    assert limit.current(now=0) == 8
    assert limit.shrink(8, now=0) == 4
    assert limit.shrink(4, now=1) == 2
    assert limit.current(now=30) == 2
    assert limit.current(now=62) == 8
    assert limit.shrink(1, now=70) == 1


def test_halves_and_slices() -> None:
    assert halves([1, 2, 3, 4, 5]) == [[1, 2, 3], [4, 5]]
    assert slices([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


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
