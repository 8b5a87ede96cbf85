"""The worker loop: claim a batch → synthesise → store, with one upkeep task and graceful shutdown.

One worker owns one model replica. Inference runs in a single dedicated executor thread because
ChatTTS is not thread-safe; the event loop stays free to renew leases, beat the heartbeat and
answer the liveness probe while the model works.

A job's story is :meth:`Worker._process`: cached answers first, then one engine call per group
of compatible jobs (split on failure so only the guilty job fails), then every outcome stored.
Everything periodic — heartbeat, lease renewal, the queue sweep — is one upkeep task with one
Redis-outage policy (:mod:`ttsq.runtime.upkeep`, shared with the webhook deliverer): a Redis failure
is reported once, marks the worker's record, and the chore runs again at its next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ttsq.domain import context
from ttsq.domain.audio import CONTENT_TYPES, ChunkJoiner, duration_s, encode_audio
from ttsq.domain.batching import (
    AdaptiveBatchLimit,
    MemoryHygiene,
    bucket_sizes,
    group_compatible,
    halves,
    plan_batch_limit,
    slices,
)
from ttsq.domain.jobs import Job, TTSParams
from ttsq.inference.base import DeviceMemory, Engine, InferenceError, OutOfMemory, PermanentError, SynthesisRequest, TransientError
from ttsq.runtime.health import CurrentJob, HeartbeatRecord, health_server
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.runtime.sdnotify import SystemdNotifier
from ttsq.runtime.upkeep import REDIS_ERRORS, Chore, RedisOutage, Upkeep
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import Claim, JobQueue
from ttsq.store.replies import Completed, Failed
from ttsq.store.streams import AudioStreams

log = logging.getLogger(__name__)

T = TypeVar("T")
_SPEAKER_CACHE_SIZE = 512
"""Speakers drawn from seeds, kept per worker. Bounded: every random request brings a new seed."""
CPU_AUTO_BATCH = 8
"""The automatic batch limit on a CPU, where a bigger batch only queues more work behind one core."""
_PROBE_TOKENS = (32, 96)
"""Audio tokens per request in the sizing probes: two lengths tell how memory grows with the length."""
Piece = tuple[int, int, bytes]
"""(chunk index, chunk total, PCM16 bytes) of one streamed piece."""


@dataclass(frozen=True)
class WorkerConfig:
    """The worker's timings and limits. Built from settings by ``worker.py``, which validates them."""

    worker_id: str
    heartbeat_interval_s: float
    sweep_interval_s: float
    job_timeout_s: float
    shutdown_grace_s: float
    health_host: str
    health_port: int
    max_batch: int
    """The largest batch ever run; with ``auto_batch`` the worker may choose less."""
    auto_batch: bool
    """Size the batch from the device at start (on CUDA); on a CPU run at most :data:`CPU_AUTO_BATCH`."""
    batch_memory_headroom: float
    stream_rtf_target: float
    max_new_token: int
    compile: bool
    batch_wait_ms: float
    oom_recover_s: float
    release_memory_above: float
    release_memory_idle_s: float
    notify_socket: str | None
    """systemd's ``NOTIFY_SOCKET`` (a ``Type=notify`` unit): ready and watchdog pings (:mod:`ttsq.runtime.sdnotify`)."""


@dataclass(frozen=True)
class Synthesised:
    """A job's audio, ready to store; ``busy_s`` is its share of the batch's inference time."""

    audio: CachedAudio
    busy_s: float
    batch: int = 1
    from_cache: bool = False
    first_audio_at: float | None = None
    """``time.perf_counter()`` when the job's first chunk of audio existed."""


@dataclass(frozen=True)
class Failure:
    error: BaseException


Outcome = Synthesised | Failure


def failure_reason(error: BaseException) -> tuple[str, bool]:
    """How a failure is recorded on the job, and whether another attempt may succeed."""
    if isinstance(error, OutOfMemory):
        return f"out of memory: {error}", True
    if isinstance(error, InferenceError):
        return f"{'inference failed' if error.retryable else 'invalid job'}: {error}", error.retryable
    return f"inference failed: {type(error).__name__}: {error}", True


class Worker:
    """Runs until :meth:`request_stop`; :meth:`run` returns False if it left an inference running."""

    def __init__(self, queue: JobQueue, engine: Engine, config: WorkerConfig, cache: ResultCache | None = None) -> None:
        self.queue = queue
        # What lives beside the jobs, on the queue's connection, names and clock:
        self.streams = AudioStreams(queue.redis, queue.keys, queue.config.result_ttl_s)
        self.heartbeats = Heartbeats(queue.redis, queue.keys, queue.config.heartbeat_ttl_s, queue.clock)
        self.engine = engine
        self.cache = cache
        self.config = config
        self.record = HeartbeatRecord(worker_id=config.worker_id)
        self.metrics = WorkerMetrics()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttsq-infer")
        self._stop = asyncio.Event()
        self._stop_deadline: float | None = None
        self._abandoned = False
        self._running: set[str] = set()
        """Ids of claimed jobs whose outcome is not stored yet: upkeep renews their leases."""
        self._speakers: OrderedDict[int, str] = OrderedDict()
        self._limit = AdaptiveBatchLimit(config.max_batch, config.oom_recover_s)
        self._hygiene = MemoryHygiene(config.release_memory_above, config.release_memory_idle_s)
        self._last_batch_at = time.monotonic()
        self._compiled_graphs_at_start: int | None = None
        self.outage = RedisOutage(log, "retrying until it is back", on_change=self._redis_changed)
        """The Redis-outage policy: a claim's backoff ends as soon as any Redis call (the upkeep's heartbeat
        every ``heartbeat_interval_s``) succeeds again."""
        self.upkeep = Upkeep(
            [
                Chore("heartbeat", config.heartbeat_interval_s, self._beat),
                Chore("idle memory release", max(1.0, config.release_memory_idle_s / 4), self._release_when_idle),
                Chore("lease renewal", queue.config.lease_s / 3, self._renew_leases),
                Chore("sweep", config.sweep_interval_s, self._sweep),
            ],
            self.outage,
            log,
            every_pass=self._every_upkeep_pass,
        )
        """Every periodic chore, in one task: the heartbeat, idle memory release, lease renewal for the jobs
        in hand (every third of a lease, so one missed renewal never loses a lease), and the queue sweep
        (which takes a lock, so one worker of the pool sweeps per interval)."""
        self._systemd = SystemdNotifier(config.notify_socket)
        self._was_alive = True
        self.metrics.watch(self.record, lambda: len(self._running), cache, self._device_memory, self._recompiles)

    @property
    def stall_after_s(self) -> float:
        return max(5 * self.config.heartbeat_interval_s, 10.0)

    def request_stop(self) -> None:
        """Stop claiming; the current batch may finish within the grace period."""
        if self._stop_deadline is None:
            log.info("stop requested: finishing the current batch (grace %.0fs)", self.config.shutdown_grace_s)
            self._stop_deadline = time.monotonic() + self.config.shutdown_grace_s
            self.record.stopping = True
            self._stop.set()

    def _past_grace(self) -> bool:
        return self._stop_deadline is not None and time.monotonic() > self._stop_deadline

    async def run(self) -> bool:
        loop = asyncio.get_running_loop()
        server = health_server(
            self.record, self.config.health_host, self.config.health_port, self.stall_after_s, self.metrics.exposition
        )
        serving = asyncio.create_task(server.serve())
        self.upkeep.start()
        try:
            await loop.run_in_executor(self._executor, self._load_and_warm)
            self._systemd.notify("READY=1", "STATUS=serving")
            await self._serve()
        finally:
            self._systemd.notify("STOPPING=1")
            self.record.stopping = True
            await self.upkeep.stop(self.config.heartbeat_interval_s + 5)
            with contextlib.suppress(*REDIS_ERRORS, TimeoutError):
                await asyncio.wait_for(self.heartbeats.remove(self.config.worker_id), 2.0)
            server.should_exit = True
            await serving
            self._executor.shutdown(wait=not self._abandoned, cancel_futures=True)
        return not self._abandoned

    def _load_and_warm(self) -> None:
        started = time.perf_counter()
        info = self.engine.load()
        self.record.model_loaded = True
        self.record.model = info.name
        self.record.speaks_noise = info.speaks_noise
        self.engine.warm_up()
        self._size_batches()
        self.record.ready = True
        load_s = time.perf_counter() - started
        self.metrics.model_load.set(load_s)
        self.metrics.info.labels(info.name, info.device).set(1)
        log.info("model %s loaded and warmed on %s in %.1fs", info.name, info.device, load_s)
        if info.speaks_noise:
            log.warning("model %s has RANDOM weights: every result is noise (testing only)", info.name)

    def _size_batches(self) -> None:
        """Choose the batch limit (``MAX_BATCH=auto``) and, with ``COMPILE=true``, compile every batch size now.

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
        self._limit = AdaptiveBatchLimit(limit, self.config.oom_recover_s)
        self.metrics.batch_limit.set(limit)
        if self.config.compile:
            buckets = bucket_sizes(limit)
            started = time.perf_counter()
            self.engine.prepare(buckets)
            log.info("compiled batch sizes %s in %.1fs", ", ".join(map(str, buckets)), time.perf_counter() - started)
        self._compiled_graphs_at_start = self.engine.stats().compiled_graphs

    def _device_memory(self) -> DeviceMemory | None:
        return self.engine.stats().memory

    def _recompiles(self) -> float | None:
        """Graphs torch.compile built after start-up: while serving this must stay 0 (a new one stalls the worker)."""
        graphs = self.engine.stats().compiled_graphs
        if graphs is None or self._compiled_graphs_at_start is None:
            return None
        return float(graphs - self._compiled_graphs_at_start)

    # ---- the loop --------------------------------------------------------------------------

    async def _serve(self) -> None:
        """Claim a batch, process it, repeat — until a stop is requested."""
        while not self._stop.is_set():
            jobs = await self._claim_batch()
            if jobs:
                await self._within_grace(self._process(jobs), len(jobs))

    async def _claim_batch(self) -> list[Job]:
        """One blocking claim, then up to the batch limit more, waiting at most ``batch_wait_ms``;
        a job whose last worker was lost runs alone.

        Every claimed job is leased to this worker at once, so a crash at any point leaves each
        of them to the sweep individually. A Redis failure returns what was claimed so far.
        """
        jobs: list[Job] = []
        try:
            claim = await self.queue.claim(self.config.worker_id)
            if claim is None:
                self.outage.back()
                return []
            jobs += self._claimed([claim])
            if claim.job.isolate and jobs:
                # Its last worker was lost mid-attempt: it may be what killed it, so it runs alone
                # (claim_more never hands out such a job either) until it succeeds once.
                log.info("%s runs alone: its worker was lost during its last attempt", claim.job.id)
                self.metrics.isolated.inc()
                return jobs
            limit = self._limit.current()
            self.metrics.batch_limit.set(limit)
            deadline = time.monotonic() + self.config.batch_wait_ms / 1000
            while len(jobs) < limit and not self._stop.is_set():
                jobs += self._claimed(await self.queue.claim_more(self.config.worker_id, limit - len(jobs)))
                remaining = deadline - time.monotonic()
                if len(jobs) >= limit or remaining <= 0:
                    break
                await asyncio.sleep(min(0.005, remaining))
        except REDIS_ERRORS as exc:
            self.outage.lost("claim", exc)
            if not jobs:
                await self.outage.back_off(self._stop)
            return jobs
        self.outage.back()
        return jobs

    def _claimed(self, claims: list[Claim]) -> list[Job]:
        """The runnable jobs among ``claims``; counts those the claim dead-lettered, and first attempts' queue wait."""
        jobs = []
        for claim in claims:
            if not claim.runnable:
                self.metrics.ended("dead_lettered", claim.job.attempts)
                continue
            if claim.job.attempts == 1 and claim.job.started_at is not None:
                self.metrics.queue_wait.observe(max(0.0, claim.job.started_at - claim.job.created_at))
            jobs.append(claim.job)
        return jobs

    async def _within_grace(self, work: Coroutine[Any, Any, None], size: int) -> None:
        """Run ``work``; after a stop request, abandon it once the grace period is over."""
        task = asyncio.create_task(work)
        while not task.done():
            await asyncio.wait({task}, timeout=0.2)
            if not task.done() and self._past_grace():
                log.warning("grace period over: leaving %d job(s) to the sweep", size)
                self._abandoned = True
                task.cancel()
                return

    async def _process(self, jobs: list[Job]) -> None:
        """A claimed batch's whole story.

        Compatible jobs (one speaker, one set of sampling parameters) run together. In each
        group, jobs whose audio is already cached are answered from the cache; the rest go to
        the engine in one call (:meth:`_synthesise` splits it when it fails); then every job's
        outcome is stored at once. Upkeep renews every lease until its job's outcome is stored.
        """
        self._running.update(job.id for job in jobs)
        claimed_at = time.perf_counter()
        try:
            for group in group_compatible(jobs):
                started = time.time()
                self.record.current_job = CurrentJob(group[0].id, started, started + self.config.job_timeout_s, len(group))
                outcomes = await self._from_cache(group)
                outcomes |= await self._synthesise([job for job in group if job.id not in outcomes])
                await asyncio.gather(*(self._settle(job, outcomes[job.id], claimed_at) for job in group))
        finally:
            self.record.current_job = None
            self._running.difference_update(job.id for job in jobs)

    async def _from_cache(self, jobs: list[Job]) -> dict[str, Outcome]:
        """An identical job may have finished since these were queued (e.g. on another worker)."""
        if self.cache is None:
            return {}
        keys = [job.params.cache_key for job in jobs]
        hits = await asyncio.gather(*(self.cache.get(key) for key in keys if key is not None))
        found = iter(hits)
        outcomes: dict[str, Outcome] = {}
        for job, key in zip(jobs, keys, strict=True):
            hit = next(found) if key is not None else None
            if hit is not None:
                outcomes[job.id] = Synthesised(hit, busy_s=0.0, from_cache=True)
        return outcomes

    async def _synthesise(self, jobs: list[Job]) -> dict[str, Outcome]:
        """Run ``jobs`` through the engine, splitting so that only a guilty job fails.

        Batches above the current limit are sliced. Out of memory halves the batch (and lowers
        the adaptive limit for a while); any other error re-runs each job alone.
        """
        if not jobs:
            return {}
        limit = self._limit.current()
        if len(jobs) > limit:
            return {job_id: outcome for part in slices(jobs, limit) for job_id, outcome in (await self._synthesise(part)).items()}
        try:
            return await self._run_batch(jobs)
        except Exception as exc:  # noqa: BLE001 - one bad batch never stops the loop
            if len(jobs) == 1:
                return {jobs[0].id: Failure(exc)}
            parts: list[list[Job]]
            if isinstance(exc, OutOfMemory):
                size = self._limit.shrink(len(jobs))
                self.metrics.oom_splits.inc()
                self.metrics.batch_limit.set(size)
                log.warning("out of memory on a batch of %d: splitting it; batches capped at %d for now", len(jobs), size)
                parts = halves(jobs)
            else:
                log.warning("a batch of %d failed (%s); running each job alone", len(jobs), exc)
                parts = [[job] for job in jobs]
            return {job_id: outcome for part in parts for job_id, outcome in (await self._synthesise(part)).items()}

    async def _run_batch(self, jobs: list[Job]) -> dict[str, Outcome]:
        """One engine call in the inference thread, its audio streamed piece by piece as it comes."""
        loop = asyncio.get_running_loop()
        pieces: list[asyncio.Queue[Piece | None]] = [asyncio.Queue() for _ in jobs]
        publishers = [asyncio.create_task(self._publish(job, queue)) for job, queue in zip(jobs, pieces, strict=True)]

        def publish(owner: int, piece: Piece) -> None:
            loop.call_soon_threadsafe(pieces[owner].put_nowait, piece)

        started = time.perf_counter()
        first_audio: dict[int, float] = {}
        out_of_memory = False
        try:
            results = await loop.run_in_executor(
                self._executor, contextvars.copy_context().run, self._infer, [job.params for job in jobs], publish, first_audio
            )
        except OutOfMemory:
            out_of_memory = True
            raise
        finally:
            for queue in pieces:
                queue.put_nowait(None)
            await asyncio.gather(*publishers)
            self._last_batch_at = time.monotonic()
            memory = self.engine.stats().memory
            reserved, total = (memory.reserved, memory.total) if memory is not None else (None, None)
            if self._hygiene.after_batch(reserved, total, out_of_memory):
                await loop.run_in_executor(self._executor, self.engine.release_memory)
        elapsed = time.perf_counter() - started
        self.metrics.inference.observe(elapsed)
        self.metrics.batch_size.observe(len(jobs))
        self.record.batches += 1
        self.record.largest_batch = max(self.record.largest_batch, len(jobs))
        return {
            job.id: Failure(result)
            if isinstance(result, Exception)
            else Synthesised(result, elapsed / len(jobs), batch=len(jobs), first_audio_at=first_audio.get(owner))
            for owner, (job, result) in enumerate(zip(jobs, results, strict=True))
        }

    async def _settle(self, job: Job, outcome: Outcome, claimed_at: float) -> None:
        """Store one job's outcome: its result (and cache entry), or its failure."""
        with context.working_on(job.id):
            await self._store(job, outcome, claimed_at)
        # Its lease is released with its outcome: renewing it while batch-mates settle would report it lost.
        self._running.discard(job.id)

    async def _store(self, job: Job, outcome: Outcome, claimed_at: float) -> None:
        if isinstance(outcome, Failure):
            await self._record_failure(job, outcome.error)
            return
        if self.cache is not None and job.params.cache_key is not None and not outcome.from_cache:
            await self.cache.put(job.params.cache_key, outcome.audio)
        result = outcome.audio
        stored = await self._persist(
            lambda: self.queue.complete(
                job.id, result.audio, result.content_type, result.duration_s, outcome.busy_s, job.params.cache_key
            )
        )
        if stored is Completed.DONE:
            self.metrics.ended("done", job.attempts)
            self.metrics.audio_seconds.inc(result.duration_s)
            if not outcome.from_cache and result.duration_s > 0:
                self.metrics.rtf.observe(outcome.busy_s / result.duration_s)
            if outcome.first_audio_at is not None:
                self.metrics.first_audio.observe(max(0.0, outcome.first_audio_at - claimed_at))
        elif stored is Failed.FAILED:
            self.metrics.ended("failed", job.attempts)
        elif stored is Completed.CANCELLED:
            self.metrics.ended("cancelled", job.attempts)
            # The audio stays in the result cache (put above): the work is done, and an identical
            # request later is answered from it; the cancelled task itself never gets it.
            log.info("  ⊘ %s cancelled while it ran: its audio is dropped", job.id)
            return
        # After completion, so a reader that sees the end of the stream finds the job done (and a
        # reader waiting on a job that streamed nothing — one chunk — wakes up at once).
        await self._best_effort(self.streams.end(job.id), "end the audio stream")
        self.record.jobs_done += 1
        log.info(
            "%6.2fs ✓ %s attempt %d (%s, %.1fs audio%s)",
            outcome.busy_s * outcome.batch,
            job.id,
            job.attempts,
            job.params.format,
            result.duration_s,
            " from the cache" if outcome.from_cache else f", batch of {outcome.batch}" if outcome.batch > 1 else "",
        )

    async def _record_failure(self, job: Job, error: BaseException) -> None:
        self.record.jobs_failed += 1
        reason, retryable = failure_reason(error)
        outcome = await self._persist(lambda: self.queue.fail(job.id, reason, retryable=retryable, cache_key=job.params.cache_key))
        if outcome is Failed.RETRY:
            self.metrics.ended("retried", job.attempts)
        elif outcome is Failed.FAILED:
            self.metrics.ended("failed", job.attempts)
        elif outcome is Failed.CANCELLED:
            self.metrics.ended("cancelled", job.attempts)
        log.warning("  ✗ %s attempt %d: %s → %s", job.id, job.attempts, reason, outcome)

    async def _publish(self, job: Job, pieces: asyncio.Queue[Piece | None]) -> None:
        """Forward audio pieces from the inference thread to the job's Redis stream, in order.

        Streaming is best effort: a piece that cannot be published is logged and skipped; the
        stored result, written at the end, is what a job owes its client. A retried attempt
        starts the stream afresh; a first attempt has nothing to clear.
        """
        fresh = job.attempts <= 1
        while (piece := await pieces.get()) is not None:
            if not fresh:
                await self._best_effort(self.streams.reset(job.id), "reset the audio stream")
                fresh = True
            await self._best_effort(self.streams.publish(job.id, *piece), "publish audio")

    # ---- the inference thread --------------------------------------------------------------

    def _infer(
        self, batch: list[TTSParams], publish: Callable[[int, Piece], None], first_audio: dict[int, float]
    ) -> list[CachedAudio | Exception]:
        """Runs in the inference thread: speaker lookup, one batched engine call, encoding.

        Each chunk's joined piece is published as PCM16 the moment it exists; the stored result
        is the same pieces, so a streamed job sounds exactly like its download. A job whose
        chunks all came back silent gets its own error; its neighbours still succeed.
        """
        speaker = self._speaker(batch[0])
        requests = [
            SynthesisRequest(
                text=params.text,
                speaker=speaker,
                seed=params.seed,
                speed=params.speed,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                refine_text=params.refine_text,
            )
            for params in batch
        ]
        joiners = [ChunkJoiner() for _ in batch]
        pieces: list[list[np.ndarray]] = [[] for _ in batch]
        for owner, chunk in self.engine.synthesize_batch(requests):
            first_audio.setdefault(owner, time.perf_counter())
            piece = joiners[owner].add(chunk.samples)
            pieces[owner].append(piece)
            if chunk.total > 1:  # a one-chunk job has nothing to stream ahead of its result
                publish(owner, (chunk.index, chunk.total, encode_audio(piece, "pcm") if piece.size else b""))
        outcomes: list[CachedAudio | Exception] = []
        for params, parts in zip(batch, pieces, strict=True):
            samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
            if samples.size == 0:
                outcomes.append(TransientError("model produced no audio"))
            else:
                audio = encode_audio(samples, params.format)
                outcomes.append(CachedAudio(audio, CONTENT_TYPES[params.format], duration_s(samples)))
        return outcomes

    def _speaker(self, params: TTSParams) -> str:
        """The speaker embedding; the API resolved any voice name to a seed or an embedding at submit."""
        if params.speaker_embedding is not None:
            return params.speaker_embedding
        if params.speaker_seed is None:
            raise PermanentError("job carries no speaker seed")
        seed = params.speaker_seed
        speaker = self._speakers.get(seed)
        if speaker is None:
            speaker = self._speakers[seed] = self.engine.speaker_from_seed(seed)
            if len(self._speakers) > _SPEAKER_CACHE_SIZE:
                self._speakers.popitem(last=False)
        else:
            self._speakers.move_to_end(seed)
        return speaker

    # ---- writing outcomes through a Redis outage -------------------------------------------

    async def _persist(self, write: Callable[[], Awaitable[T]]) -> T | None:
        """Retry a Redis write through an outage, so finished work is not thrown away.

        Gives up only when stopping past the grace period; the lease then lapses and the
        sweep requeues the job, so it is re-run rather than lost.
        """
        try:
            return await self.outage.persist(write, "store a job outcome", give_up=self._past_grace)
        except REDIS_ERRORS as exc:
            log.error("could not store a job outcome before shutdown: %s", exc)
            return None

    @staticmethod
    async def _best_effort(write: Awaitable[None], what: str) -> None:
        try:
            await write
        except REDIS_ERRORS as exc:
            log.warning("could not %s: %s", what, exc)

    def _redis_changed(self, ok: bool) -> None:
        self.record.redis_ok = ok

    # ---- upkeep ----------------------------------------------------------------------------

    def _every_upkeep_pass(self) -> None:
        """Tick the liveness record (a stalled event loop stops ticking, and the probe sees it); ping the watchdog."""
        self.record.tick()
        self._watchdog()

    def _watchdog(self) -> None:
        """Ping systemd's watchdog while liveness holds (the same judgement as ``/healthz``); a hung
        inference stops the pings, and systemd restarts the worker after ``WatchdogSec``."""
        if not self._systemd.enabled:
            return
        alive, reason = self.record.liveness(self.stall_after_s)
        if alive:
            self._systemd.notify("WATCHDOG=1", *([] if self._was_alive else ["STATUS=serving"]))
        elif self._was_alive:
            self._systemd.notify(f"STATUS=unhealthy: {reason}")
        self._was_alive = alive

    async def _release_when_idle(self) -> None:
        """Give the allocator's cache back once the worker has been idle a while (the inference thread is free)."""
        if not self._running and self._hygiene.when_idle(time.monotonic() - self._last_batch_at):
            await asyncio.get_running_loop().run_in_executor(self._executor, self.engine.release_memory)

    async def _beat(self) -> None:
        await self.heartbeats.write(self.config.worker_id, self.record.as_dict())
        self.record.last_heartbeat = time.time()

    async def _renew_leases(self) -> None:
        lost = await self.queue.renew_leases(self.config.worker_id, list(self._running))
        for job_id in lost & self._running:
            log.warning("lease on %s was lost; another worker may run it too", job_id)

    async def _sweep(self) -> None:
        await self.queue.sweep(self.config.sweep_interval_s, holder=self.config.worker_id)
