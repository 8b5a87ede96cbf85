"""GPU serving, tested on a CPU: the batch-sizing and memory-hygiene policies on allocator readings,
padding to compiled batch sizes, half-precision weights, and the worker wiring them together.

The real tiny ChatTTS engine runs every inference; where a GPU would be measured, an
:class:`EngineWrapper` reports the allocator readings an H200 gave (``../shared/gpu`` results), so
the worker's decisions are exercised exactly as on the device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.integration.runtime.test_batching import enqueue_all
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.domain.batching import MemoryHygiene, Probe, bucket_for, bucket_sizes, plan_batch_limit
from ttsq.domain.jobs import Status
from ttsq.inference.base import DeviceMemory, Engine, EngineStats, EngineWrapper, ModelLoadError, SynthesisRequest, synthesize
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.faults import FaultInjectingEngine

GIB = 1 << 30
MIB = 1 << 20

# H200, full-size checkpoint, fp32 (2026-12-01): batch 1 → 1,148 MiB peak, 10.6 ms/step; batch 64 → 4,106 MiB, 13.9 ms/step;
# one audio token is 21.3 ms of audio.
H200_SMALL = Probe(batch=16, tokens=32, peak_bytes=1_870 * MIB, seconds=32 * 0.01306, audio_s=32 * 0.02133)
H200_LARGE = Probe(batch=64, tokens=32, peak_bytes=4_106 * MIB, seconds=32 * 0.0139, audio_s=32 * 0.02133)
H200_LONGER = Probe(batch=64, tokens=96, peak_bytes=4_650 * MIB, seconds=96 * 0.0139, audio_s=96 * 0.02133)


def test_on_an_h200_the_plan_is_bound_by_stream_speed_not_memory() -> None:
    plan = plan_batch_limit(H200_SMALL, H200_LARGE, H200_LONGER, usable_bytes=120 * GIB, max_tokens=2048, rtf_target=0.8, cap=256)
    assert plan.by_memory > 256
    assert 200 <= plan.by_speed < 256 and plan.limit == plan.by_speed
    assert "stream speed" in plan.reason


def test_a_small_gpu_is_bound_by_memory_at_the_longest_request() -> None:
    plan = plan_batch_limit(H200_SMALL, H200_LARGE, H200_LONGER, usable_bytes=8 * GIB, max_tokens=2048, rtf_target=0.8, cap=256)
    per_request_at_max = (H200_LARGE.peak_bytes - H200_SMALL.peak_bytes) / 48 + (
        (H200_LONGER.peak_bytes - H200_LARGE.peak_bytes) / (64 * 64)
    ) * (2048 - 32)
    fixed = H200_SMALL.peak_bytes - 16 * (H200_LARGE.peak_bytes - H200_SMALL.peak_bytes) / 48
    assert plan.limit == plan.by_memory == int((8 * GIB - fixed) // per_request_at_max)
    assert plan.limit < 64 and "memory" in plan.reason


def test_a_slow_device_or_a_strict_target_keeps_batches_small_and_max_batch_caps_everything() -> None:
    slow = [dataclasses.replace(p, seconds=p.seconds * 4) for p in (H200_SMALL, H200_LARGE, H200_LONGER)]
    assert plan_batch_limit(*slow, usable_bytes=120 * GIB, max_tokens=2048, rtf_target=0.8, cap=256).limit == 1
    capped = plan_batch_limit(H200_SMALL, H200_LARGE, H200_LONGER, usable_bytes=120 * GIB, max_tokens=2048, rtf_target=0.8, cap=32)
    assert capped.limit == 32 and "MAX_BATCH" in capped.reason


def test_buckets_are_powers_of_two_up_to_the_limit() -> None:
    assert bucket_sizes(1) == (1,)
    assert bucket_sizes(8) == (1, 2, 4, 8)
    assert bucket_sizes(243) == (1, 2, 4, 8, 16, 32, 64, 128, 243)
    assert [bucket_for(n, (1, 2, 4, 8)) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError):
        bucket_for(9, (1, 2, 4, 8))


def test_memory_is_released_on_oom_above_the_threshold_and_once_per_idle_period_only() -> None:
    hygiene = MemoryHygiene(reserved_fraction=0.9, idle_s=60)
    assert hygiene.after_batch(None, None, failed_for_memory=True) is False, "a CPU has nothing to release"
    assert hygiene.after_batch(50 * GIB, 141 * GIB, failed_for_memory=False) is False, "not after every batch"
    assert hygiene.after_batch(50 * GIB, 141 * GIB, failed_for_memory=True) is True
    assert hygiene.after_batch(130 * GIB, 141 * GIB, failed_for_memory=False) is True
    assert hygiene.after_batch(50 * GIB, 141 * GIB, failed_for_memory=False) is False
    assert hygiene.when_idle(30) is False
    assert hygiene.when_idle(61) is True
    assert hygiene.when_idle(600) is False, "once per idle period"


# ---- the engine: padding and precision ----------------------------------------------------------


@pytest.fixture(scope="module")
def speaker(tiny_engine: ChatTTSEngine) -> str:
    return tiny_engine.speaker_from_seed(3)


def batch_audio(engine: Engine, reqs: Sequence[SynthesisRequest]) -> list[np.ndarray]:
    pieces: list[list[np.ndarray]] = [[] for _ in reqs]
    for owner, chunk in engine.synthesize_batch(reqs):
        pieces[owner].append(chunk.samples)
    return [np.concatenate(p) for p in pieces]


def test_padding_to_a_compiled_size_is_batching_with_copies_whose_audio_is_dropped(tiny_checkpoint_dir: Any, speaker: str) -> None:
    engine = ChatTTSEngine(TINY_ENGINE_CONFIG)
    engine.load()
    texts = ["First one here.", "Second one here.", "Third one here."]
    reqs = [SynthesisRequest(text=t, speaker=speaker, seed=5) for t in texts]
    unpadded_with_copy = batch_audio(engine, [*reqs, reqs[-1]])
    engine.prepare((1, 2, 4))
    calls: list[int] = []
    infer = engine._infer

    def counting(chat: Any, texts: list[str], *args: Any) -> list[Any]:
        calls.append(len(texts))
        return infer(chat, texts, *args)

    engine._infer = counting  # type: ignore[method-assign,assignment]
    padded = batch_audio(engine, reqs)
    assert calls == [4], "three rows ran as a prepared batch of four"
    assert len(padded) == 3, "pad rows never reach a result"
    for got, expected in zip(padded, unpadded_with_copy[:3], strict=True):
        assert np.array_equal(got, expected)


def test_bfloat16_weights_give_finite_audio_of_the_same_length(speaker: str) -> None:
    request = SynthesisRequest(text="Half precision, same length.", speaker=speaker, seed=2)
    reference = synthesize(_loaded(), request)
    half = _loaded(gpt_dtype="bfloat16", decoder_dtype="bfloat16")
    audio = synthesize(half, request)
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert abs(len(audio) - len(reference)) <= 0.01 * len(reference), (len(audio), len(reference))


def test_float16_is_refused_on_a_cpu() -> None:
    with pytest.raises(ModelLoadError, match="float16 needs a CUDA device"):
        _loaded(gpt_dtype="float16")


def _loaded(**dtypes: str) -> ChatTTSEngine:
    engine = ChatTTSEngine(dataclasses.replace(TINY_ENGINE_CONFIG, **dtypes))  # type: ignore[arg-type]
    engine.load()
    return engine


# ---- the worker, on allocator readings from a GPU -----------------------------------------------


class GpuReadings(EngineWrapper):
    """The real engine, reporting a GPU's allocator: probes and memory as measured on an H200."""

    def __init__(self, inner: Engine, reserved_bytes: int = 20 * GIB, usable: int = 120 * GIB) -> None:
        super().__init__(inner)
        self.reserved_bytes = reserved_bytes
        self.usable = usable
        self.prepared: list[tuple[int, ...]] = []
        self.releases = 0
        self.graphs = 7

    def stats(self) -> EngineStats:
        memory = DeviceMemory(
            allocated=GIB, reserved=self.reserved_bytes, max_allocated=2 * GIB, total=141 * GIB, free=self.usable - GIB
        )
        return EngineStats(memory=memory, compiled_graphs=self.graphs)

    def measure(self, batch: int, tokens: int) -> Probe | None:
        return {(16, 32): H200_SMALL, (64, 32): H200_LARGE, (64, 96): H200_LONGER}[(batch, tokens)]

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        """Recorded, not run: compiling 1…243-row batches of the tiny model on a CPU proves nothing more."""
        self.prepared.append(tuple(batch_sizes))

    def release_memory(self) -> None:
        self.releases += 1
        self.inner.release_memory()


async def test_auto_batch_on_a_gpu_compiles_every_size_before_serving(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    from tests.integration.api.test_metrics import samples, value

    gpu = GpuReadings(tiny_engine)
    async with running_worker(redis, gpu, max_batch="auto", compile=True) as worker:
        limit = worker.batch_limit
        assert limit is not None and 200 <= limit < 256, "sized by stream speed, as the plan test computes"
        assert gpu.prepared == [bucket_sizes(limit)], "every bucket compiled at start"
        job = task_id()
        await worker.queue.enqueue(job, params("Served on a prepared size."), single_flight=False)
        assert (await wait_final(worker.queue, job)).status is Status.DONE
        scrape = samples(worker.metrics.exposition().decode())
    assert value(scrape, "ttsq_batch_limit") == limit
    assert value(scrape, "ttsq_compile_recompiles") == 0
    assert value(scrape, "ttsq_gpu_memory_bytes", kind="reserved") == 20 * GIB


async def test_auto_batch_on_a_cpu_keeps_todays_eight(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    async with running_worker(redis, tiny_engine, max_batch="auto") as worker:
        assert worker.batch_limit == 8


async def test_memory_is_released_only_when_the_policy_says_so(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    calm = GpuReadings(tiny_engine, reserved_bytes=20 * GIB)
    async with running_worker(redis, calm, max_batch=4) as worker:
        for n in range(3):
            job = task_id()
            await worker.queue.enqueue(job, params(f"Calm batch {n}."), single_flight=False)
            assert (await wait_final(worker.queue, job)).status is Status.DONE
    assert calm.releases == 0, "no gc.collect() + empty_cache() after every batch"

    full = GpuReadings(tiny_engine, reserved_bytes=135 * GIB)
    async with running_worker(redis, full, max_batch=4) as worker:
        job = task_id()
        await worker.queue.enqueue(job, params("A nearly full GPU."), single_flight=False)
        assert (await wait_final(worker.queue, job)).status is Status.DONE
    assert full.releases >= 1

    oom = GpuReadings(FaultInjectingEngine(tiny_engine, fault_config("oom", "", oom_above_batch=1)))
    jobs = await enqueue_all(redis, [(f"Out of memory {n}.", {"seed": n}) for n in range(2)])
    async with running_worker(redis, oom, queue_config(block_s=0.2), max_batch=4, batch_wait_ms=100) as worker:
        for job in jobs:
            assert (await wait_final(worker.queue, job)).status is Status.DONE
    assert oom.releases >= 1, "released after the out-of-memory split"
