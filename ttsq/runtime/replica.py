"""The worker's model replica on its device: loaded and warmed in the model's own thread, its batch sized to the
device (``MAX_BATCH=auto``) and its sizes compiled (``COMPILE=true``) before it serves; while it serves, its memory
kept (the allocator's cache given back after an out-of-memory split, after a job when too much is reserved, and when
idle) and its compiled graphs watched (a recompile while serving stalls the worker).

The worker loop (:mod:`ttsq.runtime.worker`) decides when; this module is what the engine is asked then. Every call
into the engine runs in the inference thread (:class:`~ttsq.runtime.inference_thread.InferenceThread`): ChatTTS is
not thread-safe.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ttsq.domain.batching import MemoryHygiene, bucket_sizes, plan_batch_limit
from ttsq.inference.base import Batcher, DeviceMemory, Engine
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.inference_thread import InferenceThread
from ttsq.runtime.metrics import WorkerMetrics

if TYPE_CHECKING:  # types only: the worker builds its replica
    from ttsq.runtime.worker_config import WorkerConfig

log = logging.getLogger("ttsq.runtime.worker")  # the worker's story, one logger: its start-up reads in order

CPU_AUTO_BATCH = 8
"""The automatic batch limit on a CPU, where a bigger batch only queues more work behind one core."""
_PROBE_TOKENS = (32, 96)
"""Audio tokens per request in the sizing probes: two lengths tell how memory grows with the length."""


class ModelReplica:
    """One worker's model on its device: ``engine`` called in ``thread``; what it learns at start goes in the
    heartbeat ``record`` and the ``metrics``."""

    def __init__(
        self, engine: Engine, config: WorkerConfig, record: HeartbeatRecord, metrics: WorkerMetrics, thread: InferenceThread
    ) -> None:
        self.engine = engine
        self.config = config
        self.record = record
        self.metrics = metrics
        self._thread = thread
        self.hygiene = MemoryHygiene(config.release_memory_above, config.release_memory_idle_s)
        """When the allocator's cache is given back: after a job with too much reserved, or after a while idle."""
        self._out_of_memory_seen = 0
        self._compiled_graphs_at_start: int | None = None

    def load_and_warm(self) -> Batcher:
        """Load the model, warm it, size its batch and make its batcher (in the inference thread, before it serves)."""
        started = time.perf_counter()
        info = self.engine.load()
        self.record.model_loaded = True
        self.record.model = info.name
        self.record.speaks_noise = info.speaks_noise
        self.engine.warm_up()
        batcher = self.engine.batcher(self._size_batches(), oom_recover_s=self.config.oom_recover_s)
        load_s = time.perf_counter() - started
        self.metrics.model_load.set(load_s)
        self.metrics.info.labels(info.name, info.device).set(1)
        log.info("model %s loaded and warmed on %s in %.1fs; %d slots", info.name, info.device, load_s, batcher.slots)
        if info.speaks_noise:
            log.warning("model %s has RANDOM weights: every result is noise (testing only)", info.name)
        return batcher

    def _size_batches(self) -> int:
        """The batch limit (``MAX_BATCH=auto``: sized from the device) and, with ``COMPILE=true``, every size compiled now.

        On CUDA, three probes at the longest chunk measure memory per request and decode speed, and
        :func:`ttsq.domain.batching.plan_batch_limit` picks the largest batch that fits and keeps each
        stream ahead of playback. On a CPU the limit is :data:`CPU_AUTO_BATCH`, capped by MAX_BATCH.
        """
        cap = self.config.max_batch
        limit = cap
        if self.config.auto_batch:
            limit = min(cap, CPU_AUTO_BATCH)
            memory = self.engine.stats().memory
            small_batch, large_batch = max(1, min(cap // 4, 16)), min(cap, 64)
            if memory is not None and large_batch > small_batch:
                small = self.engine.measure(small_batch, _PROBE_TOKENS[0])
                large = self.engine.measure(large_batch, _PROBE_TOKENS[0])
                longer = self.engine.measure(large_batch, _PROBE_TOKENS[1])
                self.engine.release_memory()
                now = self.engine.stats().memory
                if small is not None and large is not None and longer is not None and now is not None:
                    usable = now.allocated + int(now.free * (1 - self.config.batch_memory_headroom))
                    plan = plan_batch_limit(
                        small,
                        large,
                        longer,
                        usable_bytes=usable,
                        max_tokens=self.config.max_new_token,
                        rtf_target=self.config.stream_rtf_target,
                        cap=cap,
                    )
                    limit = plan.limit
                    log.info("batch limit %d, set by %s", limit, plan.reason)
            else:
                log.info("batch limit %d (MAX_BATCH=auto on %s)", limit, "a CPU" if memory is None else "a GPU, capped")
        self.metrics.batch_limit.set(limit)
        if self.config.compile:
            buckets = bucket_sizes(limit)
            started = time.perf_counter()
            self.engine.prepare(buckets)
            log.info("compiled batch sizes %s in %.1fs", ", ".join(map(str, buckets)), time.perf_counter() - started)
        self._compiled_graphs_at_start = self.engine.stats().compiled_graphs
        return limit

    def device_memory(self) -> DeviceMemory | None:
        return self.engine.stats().memory

    def recompiles(self) -> float | None:
        """Graphs torch.compile built after start-up: while serving this must stay 0 (a new one stalls the worker)."""
        graphs = self.engine.stats().compiled_graphs
        if graphs is None or self._compiled_graphs_at_start is None:
            return None
        return float(graphs - self._compiled_graphs_at_start)

    def count_out_of_memory(self, batcher: Batcher | None) -> None:
        """Count the out-of-memory splits ``batcher`` made since last asked; after any, give the allocator's cache back."""
        seen = batcher.stats.out_of_memory if batcher is not None else 0
        if seen > self._out_of_memory_seen:
            self.metrics.oom_splits.inc(seen - self._out_of_memory_seen)
            self._out_of_memory_seen = seen
            self.release_memory()

    def after_job(self, failed_for_memory: bool) -> None:
        memory = self.engine.stats().memory
        reserved, total = (memory.reserved, memory.total) if memory is not None else (None, None)
        if self.hygiene.after_batch(reserved, total, failed_for_memory):
            self.release_memory()

    def release_memory(self) -> Future[None]:
        """Give the allocator's cache back, in the inference thread (between two steps)."""
        return self._thread.call(self.engine.release_memory)
