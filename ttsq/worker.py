"""The worker loop: claim → synthesise → store, with a heartbeat, a reaper and graceful shutdown.

One worker owns one model replica. Inference runs in a single dedicated executor thread because
ChatTTS is not thread-safe; the event loop stays free to renew the job's lease, tick the heartbeat
and answer the liveness probe while the model works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from redis.exceptions import RedisError

from ttsq.audio import CONTENT_TYPES, ChunkJoiner, duration_s, encode_audio
from ttsq.batching import AdaptiveBatchLimit, group_compatible, halves, slices
from ttsq.cache import CachedAudio, ResultCache
from ttsq.engine import Engine, SynthesisRequest
from ttsq.health import CurrentJob, HeartbeatRecord, health_server
from ttsq.jobs import Job, TTSParams
from ttsq.queue import JobQueue

log = logging.getLogger(__name__)

T = TypeVar("T")
_SPEAKER_CACHE_SIZE = 512
"""Speakers drawn from seeds, kept per worker. Bounded: every random request brings a new seed."""
Piece = tuple[int, int, bytes]
"""(chunk index, chunk total, PCM16 bytes) of one streamed piece."""


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str
    heartbeat_interval_s: float = 2.0
    reap_interval_s: float = 5.0
    job_timeout_s: float = 300.0
    shutdown_grace_s: float = 25.0
    health_host: str = "127.0.0.1"
    health_port: int = 8001
    redis_backoff_max_s: float = 10.0
    max_batch: int = 8
    batch_wait_ms: float = 20.0
    oom_recover_s: float = 300.0


def _is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError)


class Worker:
    """Runs until :meth:`request_stop`; :meth:`run` returns False if it left an inference running."""

    def __init__(self, queue: JobQueue, engine: Engine, config: WorkerConfig, cache: ResultCache | None = None) -> None:
        self.queue = queue
        self.engine = engine
        self.cache = cache
        self.config = config
        self.record = HeartbeatRecord(worker_id=config.worker_id)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttsq-infer")
        self._stop = asyncio.Event()
        self._closing = asyncio.Event()
        self._stop_deadline: float | None = None
        self._abandoned = False
        self._speakers: OrderedDict[int, str] = OrderedDict()
        self._limit = AdaptiveBatchLimit(config.max_batch, config.oom_recover_s)

    @property
    def stall_after_s(self) -> float:
        return max(5 * self.config.heartbeat_interval_s, 10.0)

    def request_stop(self) -> None:
        """Stop claiming; the current job may finish within the grace period."""
        if self._stop_deadline is None:
            log.info("stop requested: finishing the current job (grace %.0fs)", self.config.shutdown_grace_s)
            self._stop_deadline = time.monotonic() + self.config.shutdown_grace_s
            self.record.stopping = True
            self._stop.set()

    async def run(self) -> bool:
        loop = asyncio.get_running_loop()
        server = health_server(self.record, self.config.health_host, self.config.health_port, self.stall_after_s)
        server_task = asyncio.create_task(server.serve())
        background = [asyncio.create_task(self._heartbeat_loop())]
        try:
            await loop.run_in_executor(self._executor, self._load_and_warm)
            if not self._stop.is_set():
                background.append(asyncio.create_task(self._reap_loop()))
                await self._claim_loop()
        finally:
            self.record.stopping = True
            await self._stop_background(background)
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(self.queue.remove_heartbeat(self.config.worker_id), 2.0)
            server.should_exit = True
            await server_task
            self._executor.shutdown(wait=not self._abandoned, cancel_futures=True)
        return not self._abandoned

    # ---- start-up --------------------------------------------------------------------------

    def _load_and_warm(self) -> None:
        started = time.perf_counter()
        info = self.engine.load()
        self.record.model_loaded = True
        self.record.model = info.name
        self.record.speaks_noise = info.speaks_noise
        self.engine.warm_up()
        self.record.ready = True
        log.info("model %s loaded and warmed on %s in %.1fs", info.name, info.device, time.perf_counter() - started)
        if info.speaks_noise:
            log.warning("model %s has RANDOM weights: every result is noise (testing only)", info.name)

    # ---- the loop --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                jobs = await self._claim_batch()
            except (RedisError, OSError) as exc:
                self.record.redis_ok = False
                log.warning("Redis unavailable (%s); retrying in %.1fs", exc, backoff)
                await self._pause(backoff)
                backoff = min(backoff * 2, self.config.redis_backoff_max_s)
                continue
            backoff = 0.5
            self.record.redis_ok = True
            if jobs:
                await self._run_within_grace(jobs)

    async def _claim_batch(self) -> list[Job]:
        """One blocking claim, then up to the batch limit more, waiting at most ``batch_wait_ms``.

        Every claimed job is leased to this worker at once, so a crash at any point leaves each
        of them to the reaper individually.
        """
        claim = await self.queue.claim(self.config.worker_id)
        if claim is None:
            return []
        jobs = [claim.job] if claim.runnable else []
        limit = self._limit.current()
        deadline = time.monotonic() + self.config.batch_wait_ms / 1000
        while len(jobs) < limit and not self._stop.is_set():
            more = await self.queue.claim_more(self.config.worker_id, limit - len(jobs))
            jobs.extend(claim.job for claim in more if claim.runnable)
            remaining = deadline - time.monotonic()
            if len(jobs) >= limit or remaining <= 0:
                break
            await asyncio.sleep(min(0.005, remaining))
        return jobs

    async def _run_within_grace(self, jobs: list[Job]) -> None:
        task = asyncio.create_task(self._process_claimed(jobs))
        while not task.done():
            await asyncio.wait({task}, timeout=0.2)
            if not task.done() and self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
                log.warning("grace period over: leaving %d job(s) to the reaper", len(jobs))
                self._abandoned = True
                task.cancel()
                return

    async def _process_claimed(self, jobs: list[Job]) -> None:
        """Keep every claimed job leased until it is finished, and run compatible ones together."""
        leased = {job.id for job in jobs}
        finished = asyncio.Event()
        renewer = asyncio.create_task(self._renew_leases(leased, finished))
        try:
            for group in group_compatible(jobs):
                await self._process_group(group, leased)
        finally:
            finished.set()
            renewer.cancel()

    async def _process_group(self, jobs: list[Job], leased: set[str]) -> None:
        started = time.time()
        self.record.current_job = CurrentJob(jobs[0].id, started, started + self.config.job_timeout_s, len(jobs))
        try:
            hits = await asyncio.gather(*(self._cached(job.params.cache_key) for job in jobs))
            await asyncio.gather(
                *(self._finish(job, hit, started, leased) for job, hit in zip(jobs, hits, strict=True) if hit is not None)
            )
            await self._synthesise_group([job for job, hit in zip(jobs, hits, strict=True) if hit is None], started, leased)
        finally:
            self.record.current_job = None

    async def _synthesise_group(self, jobs: list[Job], started: float, leased: set[str]) -> None:
        """One ChatTTS batch for ``jobs``; on failure, split so that only the guilty job fails.

        Out of memory halves the batch (and lowers the adaptive limit); any other error re-runs
        each job alone, so one bad job never fails its neighbours.
        """
        if not jobs:
            return
        limit = self._limit.current()
        if len(jobs) > limit:
            for part in slices(jobs, limit):
                await self._synthesise_group(part, started, leased)
            return
        loop = asyncio.get_running_loop()
        queues: list[asyncio.Queue[Piece | None]] = [asyncio.Queue() for _ in jobs]
        publishers = [asyncio.create_task(self._publish(job, queue)) for job, queue in zip(jobs, queues, strict=True)]

        def publish(owner: int, piece: Piece | None) -> None:
            loop.call_soon_threadsafe(queues[owner].put_nowait, piece)

        try:
            outcomes = await loop.run_in_executor(self._executor, self._synthesise, [job.params for job in jobs], publish)
        except Exception as exc:  # noqa: BLE001 - one bad batch never stops the loop
            await self._close_publishers(queues, publishers)
            await loop.run_in_executor(self._executor, self.engine.release_memory)
            if len(jobs) == 1:
                await self._record_failure(jobs[0], exc)
            elif _is_out_of_memory(exc):
                size = self._limit.shrink(len(jobs))
                log.warning("out of memory on a batch of %d: splitting it; batches capped at %d for now", len(jobs), size)
                for half in halves(jobs):
                    await self._synthesise_group(half, started, leased)
            else:
                log.warning("a batch of %d failed (%s); running each job alone", len(jobs), exc)
                for job in jobs:
                    await self._synthesise_group([job], started, leased)
            return
        await self._close_publishers(queues, publishers)
        await loop.run_in_executor(self._executor, self.engine.release_memory)
        self.record.batches += 1
        self.record.largest_batch = max(self.record.largest_batch, len(jobs))
        await asyncio.gather(
            *(self._store(job, outcome, started, leased, len(jobs)) for job, outcome in zip(jobs, outcomes, strict=True))
        )

    async def _store(self, job: Job, outcome: CachedAudio | Exception, started: float, leased: set[str], batch: int) -> None:
        """One job's outcome of a batch; the jobs of a batch are stored concurrently."""
        if isinstance(outcome, Exception):
            await self._record_failure(job, outcome)
            return
        if job.params.cache_key is not None and self.cache is not None:
            await self.cache.put(job.params.cache_key, outcome)
        await self._finish(job, outcome, started, leased, batch=batch)

    async def _finish(self, job: Job, result: CachedAudio, started: float, leased: set[str], batch: int = 1) -> None:
        busy = (time.time() - started) / batch
        await self._persist(
            lambda: self.queue.complete(
                job.id, result.audio, result.content_type, result.duration_s, busy, cache_key=job.params.cache_key
            )
        )
        leased.discard(job.id)
        # After completion, so a reader that sees the end of the stream finds the job done (and a
        # reader waiting on a job that streamed nothing — one chunk — wakes up at once).
        await self._best_effort(self.queue.end_stream(job.id), "end the audio stream")
        self.record.jobs_done += 1
        log.info(
            "%6.2fs ✓ %s attempt %d (%s, %.1fs audio%s)",
            time.time() - started,
            job.id,
            job.attempts,
            job.params.format,
            result.duration_s,
            f", batch of {batch}" if batch > 1 else "",
        )

    @staticmethod
    async def _close_publishers(queues: list[asyncio.Queue[Piece | None]], publishers: list[asyncio.Task[None]]) -> None:
        for queue in queues:
            queue.put_nowait(None)
        await asyncio.gather(*publishers)

    async def _cached(self, key: str | None) -> CachedAudio | None:
        """An identical job may have finished since this one was queued (e.g. on another worker)."""
        if key is None or self.cache is None:
            return None
        return await self.cache.get(key)

    async def _record_failure(self, job: Job, exc: Exception) -> None:
        self.record.jobs_failed += 1
        if _is_out_of_memory(exc):
            reason, retryable = f"out of memory: {exc}", True
        elif isinstance(exc, ValueError):
            reason, retryable = f"invalid job: {exc}", False
        else:
            reason, retryable = f"inference failed: {type(exc).__name__}: {exc}", True
        outcome = await self._persist(lambda: self.queue.fail(job.id, reason, retryable=retryable, cache_key=job.params.cache_key))
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
                await self._best_effort(self.queue.reset_stream(job.id), "reset the audio stream")
                fresh = True
            await self._best_effort(self.queue.publish_piece(job.id, *piece), "publish audio")

    @staticmethod
    async def _best_effort(write: Awaitable[None], what: str) -> None:
        try:
            await write
        except (RedisError, OSError) as exc:
            log.warning("could not %s: %s", what, exc)

    def _synthesise(self, batch: list[TTSParams], publish: Callable[[int, Piece | None], None]) -> list[CachedAudio | Exception]:
        """Runs in the inference thread: speaker lookup, one batched ChatTTS run, encoding.

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
            piece = joiners[owner].add(chunk.samples)
            pieces[owner].append(piece)
            if chunk.total > 1:  # a one-chunk job has nothing to stream ahead of its result
                publish(owner, (chunk.index, chunk.total, encode_audio(piece, "pcm") if piece.size else b""))
        outcomes: list[CachedAudio | Exception] = []
        for params, parts in zip(batch, pieces, strict=True):
            samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
            if samples.size == 0:
                outcomes.append(RuntimeError("model produced no audio"))
            else:
                outcomes.append(
                    CachedAudio(encode_audio(samples, params.format), CONTENT_TYPES[params.format], duration_s(samples))
                )
        return outcomes

    def _speaker(self, params: TTSParams) -> str:
        """The speaker embedding; the API resolved any voice name to a seed or an embedding at submit."""
        if params.speaker_embedding is not None:
            return params.speaker_embedding
        if params.speaker_seed is None:
            raise ValueError("job carries no speaker seed")
        seed = params.speaker_seed
        speaker = self._speakers.get(seed)
        if speaker is None:
            speaker = self._speakers[seed] = self.engine.speaker_from_seed(seed)
            if len(self._speakers) > _SPEAKER_CACHE_SIZE:
                self._speakers.popitem(last=False)
        else:
            self._speakers.move_to_end(seed)
        return speaker

    # ---- upkeep ----------------------------------------------------------------------------

    async def _persist(self, write: Callable[[], Awaitable[T]]) -> T | None:
        """Retry a Redis write through an outage, so finished work is not thrown away.

        Gives up only when stopping past the grace period; the lease then lapses and the
        reaper requeues the job, so it is re-run rather than lost.
        """
        backoff = 0.2
        while True:
            try:
                value = await write()
                self.record.redis_ok = True
                return value
            except (RedisError, OSError) as exc:
                self.record.redis_ok = False
                if self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
                    log.error("could not store a job outcome before shutdown: %s", exc)
                    return None
                log.warning("Redis unavailable while storing a job outcome (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.redis_backoff_max_s)

    async def _renew_leases(self, leased: set[str], finished: asyncio.Event) -> None:
        """Renew the lease of every claimed job that is not finished yet."""
        interval = self.queue.config.lease_s / 3
        while True:
            await self._sleep_unless(finished, interval)
            if finished.is_set():
                return
            for job_id in list(leased):
                try:
                    if not await self.queue.renew_lease(job_id, self.config.worker_id):
                        log.warning("lease on %s was lost; another worker may run it too", job_id)
                except (RedisError, OSError) as exc:
                    log.warning("could not renew the lease on %s: %s", job_id, exc)

    async def _stop_background(self, tasks: list[asyncio.Task[None]]) -> None:
        """End the upkeep loops by signal, not by cancellation alone.

        A cancellation that lands inside a redis-py command can be absorbed by the client, which
        would leave the loop running forever; the loops therefore watch ``_closing`` and exit on
        their own, and cancellation is only the fallback.
        """
        self._closing.set()
        _, pending = await asyncio.wait(tasks, timeout=self.config.heartbeat_interval_s + 5)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=2)

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_s
        while not self._closing.is_set():
            self.record.tick()
            try:
                await asyncio.wait_for(self.queue.write_heartbeat(self.config.worker_id, self.record.as_dict()), interval)
                self.record.redis_ok = True
            except (RedisError, OSError, TimeoutError):
                self.record.redis_ok = False
            await self._sleep_unless(self._closing, interval)

    async def _reap_loop(self) -> None:
        while not self._closing.is_set():
            try:
                await self.queue.reap()
            except (RedisError, OSError) as exc:
                log.debug("reaper skipped a round: %s", exc)
            except Exception:
                log.exception("reaper round failed")
            await self._sleep_unless(self._closing, self.config.reap_interval_s)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when a stop is requested."""
        await self._sleep_unless(self._stop, seconds)

    @staticmethod
    async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
