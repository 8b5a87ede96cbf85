"""The worker's Prometheus metrics, served at ``/metrics`` on its health port.

Labels are bounded: outcome names, the attempt number (at most MAX_ATTEMPTS), the cache level,
the memory kind — never task ids, texts or voice names. Each worker process has its own registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ttsq.inference.base import Batcher, DeviceMemory
from ttsq.runtime.health import HeartbeatRecord
from ttsq.store.cache import ResultCache
from ttsq.store.metrics import CacheCollector

JobOutcome = Literal["done", "retried", "failed", "dead_lettered", "cancelled"]

INFERENCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""One engine call: a tenth of a second on a GPU for a short batch, minutes for long text on a CPU."""
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0)
"""Real-time factor = seconds of inference per second of audio: below 1 is faster than real time."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SLACK_BUCKETS = (-5.0, -1.0, -0.25, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds of audio a stream's listener still had when its next piece came; below 0: it ran dry (an underrun)."""
CANCEL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""A cancel's way to the engine: a few milliseconds through the cancels stream; a lease renewal's third of a lease
(10 s at the defaults) when the notice was missed."""


class _DeviceCollector(Collector):
    """``ttsq_gpu_memory_bytes{kind}`` on CUDA and ``ttsq_compile_recompiles`` with torch.compile; nothing on a CPU."""

    def __init__(self, memory: Callable[[], DeviceMemory | None], recompiles: Callable[[], float | None]) -> None:
        self.memory = memory
        self.recompiles = recompiles

    def collect(self) -> Iterator[Metric]:
        memory = self.memory()
        if memory is not None:
            family = GaugeMetricFamily(
                "ttsq_gpu_memory_bytes",
                "The GPU's memory per torch's caching allocator (total = the device's capacity, free = unused by anyone).",
                labels=["kind"],
            )
            for kind in ("allocated", "reserved", "max_allocated", "total", "free"):
                family.add_metric([kind], getattr(memory, kind))
            yield family
        recompiles = self.recompiles()
        if recompiles is not None:
            yield GaugeMetricFamily(
                "ttsq_compile_recompiles",
                "Graphs torch.compile built after start-up (every batch size is compiled before serving: this stays 0).",
                value=recompiles,
            )


class _BatcherCollector(Collector):
    """How full the engine's steps run, read from its batcher at scrape time (nothing before it exists).

    ``ttsq_engine_row_steps_total / ttsq_engine_steps_total`` is the mean number of rows per step (the
    occupied slots); ``1 - row_steps / slot_steps`` is the share of computed rows that were waste
    (padding, free slots inside a step's span).
    """

    def __init__(self, batcher: Callable[[], Batcher | None]) -> None:
        self.batcher = batcher

    def collect(self) -> Iterator[Metric]:
        batcher = self.batcher()
        if batcher is None:
            return
        stats = batcher.stats
        yield CounterMetricFamily("ttsq_engine_steps", "Engine steps run (decode steps, or grouped calls).", value=stats.steps)
        yield CounterMetricFamily("ttsq_engine_row_steps", "Rows advanced, summed over steps.", value=stats.row_steps)
        yield CounterMetricFamily(
            "ttsq_engine_slot_steps", "Rows computed, summed over steps: advanced, padding, free.", value=stats.slot_steps
        )
        yield CounterMetricFamily(
            "ttsq_engine_suspect_rows", "Rows run again alone because a step they shared failed.", value=stats.suspects
        )
        yield GaugeMetricFamily("ttsq_engine_rows_active", "Rows in the engine's slots now.", value=batcher.active_rows)
        yield GaugeMetricFamily("ttsq_engine_rows_waiting", "Rows waiting for a slot now.", value=batcher.waiting_rows)
        yield GaugeMetricFamily("ttsq_engine_slots", "Slots the engine has (the batch limit it started with).", value=batcher.slots)


TENANT_LABELS = 20
"""Distinct tenants one worker labels its claims with; later ones are counted as ``other`` (bounded cardinality)."""


class WorkerMetrics:
    def __init__(self, tenant_labels: int = TENANT_LABELS) -> None:
        self.registry = registry = CollectorRegistry()
        self.jobs = Counter(
            "ttsq_jobs",
            "Job attempts ended by this worker, by outcome (done; retried: failed, will run again; failed: for good, "
            "dead-lettered; dead_lettered: no attempts left when claimed; cancelled: while it ran) and attempt number.",
            ["outcome", "attempt"],
            registry=registry,
        )
        for outcome in get_args(JobOutcome):
            self.jobs.labels(outcome, "1")
        self.queue_wait = Histogram(
            "ttsq_queue_wait_seconds", "From submit to a worker's claim (first attempts).", buckets=WAIT_BUCKETS, registry=registry
        )
        self.inference = Histogram(
            "ttsq_inference_seconds",
            "One engine step: a decode step of every row in flight (ttsq's decoder) or one grouped call (ENGINE_BACKEND=chattts).",
            buckets=INFERENCE_BUCKETS,
            registry=registry,
        )
        self.rtf = Histogram(
            "ttsq_real_time_factor",
            "Per job: its time in the engine (claim to last chunk) divided by its audio's length (below 1: faster than real time).",
            buckets=RTF_BUCKETS,
            registry=registry,
        )
        self.first_audio = Histogram(
            "ttsq_time_to_first_audio_seconds",
            "Per job: from its claim to its first audio released to its stream (a piece of its first chunk with "
            "PIECE_TOKENS, else the whole first chunk): what a streaming client waits once the job is picked up.",
            buckets=INFERENCE_BUCKETS,
            registry=registry,
        )
        self.batch_size = Histogram(
            "ttsq_batch_size", "Rows (sentence chunks) per engine step: occupied slots.", buckets=BATCH_BUCKETS, registry=registry
        )
        self.audio_seconds = Counter("ttsq_audio_seconds", "Seconds of audio produced.", registry=registry)
        self.chunks = Counter(
            "ttsq_chunks_synthesised", "Sentence chunks this worker's engine synthesised to their end.", registry=registry
        )
        self.document_parts_kept = Counter(
            "ttsq_document_parts_kept",
            "Parts of documents an earlier attempt had published whole, which this worker did not synthesise again.",
            registry=registry,
        )
        self.tenant_claims = Counter(
            "ttsq_tenant_jobs_claimed",
            "Jobs this worker claimed, by tenant (the first TENANT_LABELS tenants it saw by name, the rest as 'other') "
            "and priority lane: each tenant's share of the workers (docs/fairness.md).",
            ["tenant", "priority"],
            registry=registry,
        )
        self._tenant_labels = tenant_labels
        self._tenants: set[str] = set()
        self.oom_splits = Counter(
            "ttsq_oom_splits", "Times the device ran out of memory and the engine halved the slots in use.", registry=registry
        )
        self.isolated = Counter(
            "ttsq_isolated_runs",
            "Jobs run alone because their worker was lost during their last attempt (poison isolation).",
            registry=registry,
        )
        self.stale = Counter(
            "ttsq_stale_claims",
            "Writes the queue refused because this worker's claim on the job was stale (its lease lapsed and the job was "
            "requeued, perhaps claimed by another worker), by what was refused (renew, stream, completion, failure).",
            ["refused"],
            registry=registry,
        )
        for refused in ("renew", "stream", "completion", "failure"):
            self.stale.labels(refused)
        self.swept = Counter(
            "ttsq_sweep_requeued",
            "Jobs this worker's sweeps put back in the queue, by why: heartbeat (their worker's heartbeat had lapsed: it "
            "died, seconds ago), lease (their lease had lapsed: a worker that beat but stopped renewing), unstarted "
            "(claimed by an older release and never started).",
            ["reason"],
            registry=registry,
        )
        for reason in ("heartbeat", "lease", "unstarted"):
            self.swept.labels(reason)
        self.taken_back = Counter(
            "ttsq_claims_taken_back",
            "Jobs this worker dropped because its heartbeat had lapsed (a stalled event loop, Redis out of reach) and the "
            "sweep had taken their claims back; they run again elsewhere.",
            registry=registry,
        )
        self.cancels = Counter(
            "ttsq_cancels_while_running",
            "Jobs cancelled while this worker ran them whose rows it stopped, by how it learnt of the cancel: notice (the "
            "shard's cancels stream, at once), renewal (its next lease renewal: the notice was missed), claim (cancelled "
            "before this claim of it).",
            ["via"],
            registry=registry,
        )
        for via in ("notice", "renewal", "claim"):
            self.cancels.labels(via)
        self.cancel_latency = Histogram(
            "ttsq_cancel_latency_seconds",
            "From a caller's cancel of a running job (its entry on the cancels stream, by Redis's clock) to this worker "
            "handing it to the engine, whose next decode step drops the job's rows.",
            buckets=CANCEL_BUCKETS,
            registry=registry,
        )
        self.batch_limit = Gauge(
            "ttsq_batch_limit", "The largest batch the worker will run now (MAX_BATCH, or less after an OOM).", registry=registry
        )
        self.in_flight = Gauge("ttsq_jobs_in_flight", "Jobs this worker has claimed and not finished.", registry=registry)
        self.model_load = Gauge("ttsq_model_load_seconds", "How long loading and warming the model took.", registry=registry)
        self.tick_age = Gauge(
            "ttsq_worker_loop_tick_age_seconds",
            "Seconds since the event loop last ticked (liveness fails past a limit).",
            registry=registry,
        )
        self.heartbeat_age = Gauge(
            "ttsq_worker_heartbeat_age_seconds", "Seconds since the heartbeat was last written to Redis.", registry=registry
        )
        self.underruns = Counter(
            "ttsq_stream_underruns",
            "Pieces of a job's stream handed on after a listener playing it from its first audio would have run dry.",
            registry=registry,
        )
        self.slack = Histogram(
            "ttsq_stream_slack_seconds",
            "At each piece of a stream after its first: the audio its listener still had (negative: an underrun).",
            buckets=SLACK_BUCKETS,
            registry=registry,
        )
        self.stream_capacity = Gauge(
            "ttsq_stream_capacity_rows",
            "Rows a decode step keeps ahead of real time (STREAM_RTF_TARGET), from the steps' fitted cost; -1 before a step.",
            registry=registry,
        )
        self.stream_capacity.set(-1)
        self.info = Gauge(
            "ttsq_worker_info", "1, labelled with the model and device this worker runs.", ["model", "device"], registry=registry
        )

    def watch(
        self,
        record: HeartbeatRecord,
        running: Callable[[], int],
        cache: ResultCache | None,
        memory: Callable[[], DeviceMemory | None],
        recompiles: Callable[[], float | None],
    ) -> None:
        """Gauges read at scrape time from the worker's own state."""
        self.tick_age.set_function(lambda: time.time() - record.last_tick)
        self.heartbeat_age.set_function(lambda: time.time() - record.last_heartbeat if record.last_heartbeat else float("nan"))
        self.in_flight.set_function(lambda: float(running()))
        self.registry.register(_DeviceCollector(memory, recompiles))
        if cache is not None:
            self.registry.register(CacheCollector(cache))

    def watch_batcher(self, batcher: Callable[[], Batcher | None]) -> None:
        """The engine's step counters, once the worker has its batcher."""
        self.registry.register(_BatcherCollector(batcher))

    def claimed(self, tenant: str, priority: str) -> None:
        """One job claimed for ``tenant``: the first ``tenant_labels`` tenants this worker sees keep their name, the
        rest share ``other`` — first come rather than top-N, because a counter's label must never change its mind."""
        if tenant not in self._tenants and len(self._tenants) < self._tenant_labels:
            self._tenants.add(tenant)
        self.tenant_claims.labels(tenant if tenant in self._tenants else "other", priority).inc()

    def ended(self, outcome: JobOutcome, attempt: int) -> None:
        self.jobs.labels(outcome, str(attempt)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
