"""The worker on its default engine, ttsq's decoder: jobs of any voice share steps, stream as their
chunks end, and a cancelled job's rows leave the engine at once. Real tiny ChatTTS, real Redis."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import soundfile as sf
from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.integration.runtime.test_worker import params, running_worker, wait_final, wait_until
from ttsq.domain.jobs import Job, Status
from ttsq.inference.base import Batcher, EngineWrapper, SynthesisRequest
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.faults import FaultInjectingEngine
from ttsq.runtime.worker import Worker


class StepLog(EngineWrapper):
    """The real engine, recording which requests ran together in each step (through the batcher's hook)."""

    def __init__(self, inner: DecoderEngine | FaultInjectingEngine) -> None:
        super().__init__(inner)
        self.steps: list[set[str]] = []

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        batcher = self.inner.batcher(slots, oom_recover_s=oom_recover_s)
        inner_hook = batcher.hook

        def record(reqs: Sequence[SynthesisRequest]) -> None:
            self.steps.append({req.text for req in reqs})
            if inner_hook is not None:
                inner_hook(reqs)

        batcher.hook = record
        return batcher


def pcm(audio: bytes) -> np.ndarray:
    samples, _ = sf.read(io.BytesIO(audio), dtype="int16")
    return np.asarray(samples)


async def test_jobs_of_different_voices_and_parameters_share_steps_and_sound_as_they_do_alone(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    jobs = {
        "Alpha voice speaks first.": params("Alpha voice speaks first.", speaker_seed=1, seed=5, temperature=0.2),
        "Beta voice answers now.": params("Beta voice answers now.", speaker_seed=2, seed=6, top_k=5, speed=7),
        "你好，这是第三个声音。": params("你好，这是第三个声音。", speaker_seed=3, seed=7, top_p=0.9),
    }
    spy = StepLog(tiny_decoder_engine)
    together: dict[str, np.ndarray] = {}
    async with running_worker(redis, spy, max_batch=8, batch_wait_ms=200) as worker:
        ids = {text: task_id() for text in jobs}
        for text, job_params in jobs.items():
            await worker.queue.enqueue(ids[text], job_params, single_flight=False)
        for text, job_id in ids.items():
            assert (await wait_final(worker.queue, job_id)).status is Status.DONE
            result = await worker.queue.result(job_id)
            assert result is not None
            together[text] = pcm(result)
    assert any(len(step) == 3 for step in spy.steps), "the three voices never shared a step"
    async with running_worker(redis, tiny_decoder_engine, max_batch=8) as worker:
        for text, job_params in jobs.items():
            job_id = task_id()
            await worker.queue.enqueue(job_id, job_params, single_flight=False)
            assert (await wait_final(worker.queue, job_id)).status is Status.DONE
            result = await worker.queue.result(job_id)
            assert result is not None
            alone = pcm(result)
            # float32 batched products round differently in the last bit: at most one 16-bit step apart.
            assert alone.shape == together[text].shape and np.abs(alone.astype(int) - together[text].astype(int)).max() <= 1


async def test_a_job_cancelled_while_it_runs_leaves_the_engine_and_ends_cancelled(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    held = FaultInjectingEngine(tiny_decoder_engine, fault_config("hang", "HELD", hang_s=60))
    long_text = "HELD. " + "This sentence is one of many in a long text. " * 8
    async with running_worker(redis, held, queue_config(block_s=0.2, lease_s=9), max_batch=8) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(long_text), single_flight=False)
        job = await wait_final_or_running(worker, job_id)
        assert (await worker.queue.cancel(job, reader=None)).name.lower() == "cancelling"
        ended = await wait_final(worker.queue, job_id, timeout_s=30)
        held.release()
        assert ended.status is Status.CANCELLED
        assert await worker.queue.result(job_id) is None
        batcher = worker._batcher
        assert batcher is not None

        async def empty() -> bool:
            return not batcher.busy

        await wait_until(empty, 30)
        assert job_id not in worker._in_flight and job_id not in worker._running


async def wait_final_or_running(worker: Worker, job_id: str) -> Job:
    async def running() -> bool:
        job = await worker.queue.get(job_id)
        return job is not None and job.status is Status.RUNNING and job_id in worker._in_flight

    await wait_until(running, 60)
    job = await worker.queue.get(job_id)
    assert job is not None
    return job
