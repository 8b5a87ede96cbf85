"""The worker loop: claim jobs as the engine has room → stream their chunks in → store each job as it ends.

One worker owns one model replica. The model lives in one thread of its own
(:class:`~ttsq.runtime.inference_thread.InferenceThread`: ChatTTS is not thread-safe, and a decode
step must not wait on the event loop); the event loop claims, renews leases, publishes audio,
stores results and answers the probes.

Jobs flow rather than batch: the loop claims while the engine's batcher has room (fewer waiting rows
than it has slots), hands each job to the thread, and the batcher starts its chunks at the next step
boundary beside whatever else is decoding, of any voice. A job's story is :meth:`Worker._start`
(cached answer, or into the engine) and :meth:`Worker._finish` (its chunks joined, encoded, stored);
its first audio is streamed the moment its first chunk ends. Everything periodic — lease renewal, the queue
sweep — is one upkeep task with one Redis-outage policy (:mod:`ttsq.runtime.upkeep`, shared with the webhook
deliverer; the worker's chores are its :class:`~ttsq.runtime.upkeep.WorkerChores`), beside the heartbeat's own task
(a beat older than ``HEARTBEAT_TTL_S`` and the sweep takes the worker's jobs back, so nothing may hold it up) and a
blocking read of the queue's cancels (:class:`~ttsq.runtime.upkeep.CancelFollower`: a job cancelled while it runs
leaves the engine at the next step). Which speaker a job is synthesised with is :mod:`ttsq.runtime.speakers`'; taking
the jobs (the claims and what they bring) :mod:`ttsq.runtime.worker_claims`'; the model on its device (loaded, sized,
its memory kept) :mod:`ttsq.runtime.replica`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import CONTENT_TYPES, SAMPLE_RATE, duration_s, encode_audio
from ttsq.domain.captions import spoken_text
from ttsq.domain.jobs import AudioFormat, Job
from ttsq.domain.segments import Part
from ttsq.inference.base import (
    Batcher,
    Engine,
    OutOfMemory,
    PermanentError,
    PieceReady,
    RequestFailed,
    TransientError,
)
from ttsq.inference.playback import Listener, StepCost
from ttsq.inference.stream_listeners import StreamCue, StreamListeners
from ttsq.runtime.assembly import JobAudio, RefinedChunks, part_key, parts_of_key
from ttsq.runtime.documents import DocumentFeed, document_outcome, resume
from ttsq.runtime.health import HeartbeatRecord, health_server
from ttsq.runtime.inference_thread import InferenceThread, StepReport
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.runtime.outcomes import (
    CancelledWhileRunning,
    Failure,
    Outcome,
    Outcomes,
    Piece,
    Synthesised,
    UnreadableJob,
    heard,
    stream_cue,
    token,
)
from ttsq.runtime.replica import ModelReplica
from ttsq.runtime.sdnotify import SystemdNotifier
from ttsq.runtime.speakers import Speakers, part_request, recorded_speaker
from ttsq.runtime.stream_admission import StreamAdmission, slack_of
from ttsq.runtime.upkeep import (
    REDIS_ERRORS,
    CancelFollower,
    Chore,
    RedisOutage,
    Upkeep,
    WorkerChores,
    incarnation,
)
from ttsq.runtime.voice_encoder import VoiceEncoderLoop
from ttsq.runtime.worker_claims import WorkerClaims
from ttsq.runtime.worker_config import WorkerConfig
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams
from ttsq.store.voice_encodings import VoiceEncodings

log = logging.getLogger(__name__)

T = TypeVar("T")
_ROOM_PER_SLOT = 2
"""Jobs in hand per slot at most: the rows decoding, and as many claimed to take their slots."""


@dataclass
class _InFlight:
    """A claimed job on its way through the engine."""

    job: Job
    claimed_at: float
    """``time.perf_counter()`` at its claim."""
    audio: JobAudio = field(default_factory=JobAudio)
    pieces: asyncio.Queue[Piece | None] | None = None
    publisher: asyncio.Task[None] | None = None
    listener: Listener = field(default_factory=Listener)
    """A listener playing the job's stream from its first piece (a stream's across its jobs: :attr:`cue`): whether the
    next one comes before it runs dry."""
    cue: StreamCue | None = None
    keys: list[str] = field(default_factory=list)
    """Its engine requests, one per part with something to speak (:func:`ttsq.runtime.assembly.part_key`)."""
    refined: RefinedChunks | None = None
    """A refine job's text, chunk by chunk (None for every job that makes audio)."""
    feed: DocumentFeed | None = None
    """A document's parts as they go into the engine (None for every other job)."""

    def stream(
        self, piece: Piece, publish: Callable[[Callable[[], Job], asyncio.Queue[Piece | None]], Coroutine[Any, Any, None]]
    ) -> None:
        """Publish a piece to the job's Redis stream (:meth:`Outcomes.publish`), in order, without holding up the loop."""
        if self.pieces is None:
            self.pieces = asyncio.Queue()
            self.publisher = asyncio.create_task(publish(lambda: self.job, self.pieces))
        self.pieces.put_nowait(piece)


class Worker:
    """Runs until :meth:`request_stop`; :meth:`run` returns False if it left an inference running."""

    def __init__(self, queue: JobQueue, engine: Engine, config: WorkerConfig, cache: ResultCache | None = None) -> None:
        self.queue = queue
        # What lives beside the jobs, on the queue's connection, names and clock:
        self.streams = AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)
        self.heartbeats = Heartbeats(queue.redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock)
        self.engine = engine
        self.cache = cache
        self.config = config
        self.identity = incarnation(config.worker_id)
        """This process's name in the queue (its claims, heartbeats, sweeps): ``WORKER_ID`` and a random suffix, so a
        restarted worker under the same ``WORKER_ID`` never vouches for the jobs its predecessor died holding."""
        self.record = HeartbeatRecord(worker_id=config.worker_id)
        self.metrics = WorkerMetrics()
        self._thread = InferenceThread(self._report_from_thread, self.record, config.job_timeout_s)
        self.replica = ModelReplica(engine, config, self.record, self.metrics, self._thread)
        """The model on its device: loaded, warmed and sized in the inference thread; its memory kept while it serves."""
        self._batcher: Batcher | None = None
        self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttsq-encode")
        """Encoding a finished job (mp3, opus: ~10-20 ms per second of audio) off the event loop and off the model's thread."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._room = asyncio.Event()
        """Set whenever the engine may have room for more jobs (a step ended, a job left)."""
        self._stop_deadline: float | None = None
        self._abandoned = False
        self._in_flight: dict[str, _InFlight] = {}
        self._running: dict[str, int] = {}
        """Claimed jobs whose outcome is not stored yet, id → the claim's fencing token: upkeep renews their leases."""
        self._alone: set[str] = set()
        """Ids of jobs that must run alone (their last worker was lost) whose outcome is not stored yet: until it is,
        nothing else is claimed, so a job that kills the process takes no other job's synthesis or storing with it."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.speakers = Speakers(engine)
        """Speakers drawn from seeds, kept (the inference thread's own: drawing one runs the model's code)."""
        self._last_step_at = time.monotonic()
        self.clock: Callable[[], float] = time.monotonic
        """The playback clock of the jobs' listeners (a test's own, if it sets one)."""
        self.streams_heard = StreamListeners(seed=False)
        """The listeners of the streams its jobs belong to (a session's chunks), so their underruns count across jobs."""
        self.step_cost = StepCost()
        """Seconds per decode step against the rows it ran: how many rows stay ahead of real time."""
        self.stream_admission = StreamAdmission(config.stream_admission, self.step_cost, self.record)
        """``STREAM_ADMISSION``: the claims held to the streams that stay real-time, that room reported (:meth:`_free_room`)."""
        self.stream_target = config.stream_rtf_target
        """The share of a token's audio a decode step may take for streams to keep ahead of their listeners: the
        setting, or the engine's pieces' own bound on a row's start where that is tighter (``Batcher.keep_ahead``)."""
        self.outage = RedisOutage(log, "retrying until it is back", on_change=self._redis_changed)
        """The Redis-outage policy: a claim's backoff ends as soon as any Redis call (the upkeep's heartbeat
        every ``heartbeat_interval_s``) succeeds again."""
        self.outcomes = Outcomes(
            queue,
            self.streams,
            cache,
            self.metrics,
            self.record,
            self.outage,
            recorded_speaker=functools.partial(recorded_speaker, speakers=self.speakers),
            running=self._running,
            alone=self._alone,
            past_grace=self._past_grace,
        )
        """Where a job's audio is published and its outcome stored."""
        self.claims = WorkerClaims(
            queue,
            self.outage,
            self.record,
            self.metrics,
            identity=self.identity,
            batch_wait_ms=config.batch_wait_ms,
            stop=self._stop,
            in_flight=self._in_flight,
        )
        """Taking jobs in: a blocking claim, then more up to the room the loop has (:meth:`_free_room`), counted."""
        self._systemd = SystemdNotifier(config.notify_socket)
        chores = WorkerChores(
            queue,
            self.heartbeats,
            self.record,
            self.metrics,
            log,
            worker_id=self.identity,
            sweep_interval_s=config.sweep_interval_s,
            stall_after_s=config.stall_after_s,
            systemd=self._systemd,
            hygiene=self.replica.hygiene,
            running=self._running,
            in_flight=self._in_flight,
            idle_s=lambda: time.monotonic() - self._last_step_at,
            release_memory=lambda: asyncio.wrap_future(self.replica.release_memory()),
            cancel=self._cancelled_while_running,
            drop=self._taken_back,
        )
        self.beats = Upkeep([Chore("heartbeat", config.heartbeat_interval_s, chores.beat)], self.outage, log)
        """The heartbeat, in a task of its own: what keeps this worker's claims its own (:mod:`ttsq.store.heartbeats`)."""
        self.upkeep = Upkeep(
            [
                Chore("idle memory release", max(1.0, config.release_memory_idle_s / 4), chores.release_when_idle),
                Chore("lease renewal", queue.config.lease_s / 3, chores.renew_leases),
                Chore("sweep", config.sweep_interval_s, chores.sweep),
            ],
            self.outage,
            log,
            every_pass=chores.every_upkeep_pass,
        )
        """Every other periodic chore, in one task: idle memory release, lease renewal for the jobs in hand (every
        third of a lease, so one missed renewal never loses a lease), and the queue sweep (which takes a lock, so one
        worker of the pool sweeps per interval)."""
        self.cancels = CancelFollower(
            queue,
            self.outage,
            self.metrics,
            log,
            worker_id=self.identity,
            block_s=queue.config.block_s,
            running=self._running,
            in_flight=self._in_flight,
            cancel=self._cancelled_while_running,
        )
        """The shards' cancels streams, followed: a job cancelled while it runs leaves the engine at the next step."""
        self.voice_encoder = VoiceEncoderLoop(
            VoiceEncodings(queue.redis, queue.keys, queue.config.block_s),
            engine.speaker_from_audio,
            self._thread.call,
            self.outage,
        )
        """Reference recordings → speaker prompts for ``POST /v1/voices``, once the model is loaded (docs/voices.md)."""
        self.metrics.watch(self.record, lambda: len(self._running), cache, self.replica.device_memory, self.replica.recompiles)
        self.metrics.watch_batcher(lambda: self._batcher)

    @property
    def batch_limit(self) -> int | None:
        """The most rows the engine runs at once now (None until the model is loaded)."""
        return None if self._batcher is None else self._batcher.slot_limit

    def request_stop(self) -> None:
        """Stop claiming; the jobs in hand may finish within the grace period."""
        if self._stop_deadline is None:
            log.info("stop requested: finishing the jobs in hand (grace %.0fs)", self.config.shutdown_grace_s)
            self._stop_deadline = time.monotonic() + self.config.shutdown_grace_s
            self.record.stopping = True
            self._stop.set()
            self._room.set()

    def _past_grace(self) -> bool:
        return self._stop_deadline is not None and time.monotonic() > self._stop_deadline

    async def run(self) -> bool:
        self._loop = asyncio.get_running_loop()
        server = health_server(
            self.record, self.config.health_host, self.config.health_port, self.config.stall_after_s, self.metrics.exposition
        )
        serving = asyncio.create_task(server.serve())
        log.info("worker %s is %s in the queue", self.config.worker_id, self.identity)
        self.beats.start()
        self.upkeep.start()
        self.cancels.start()
        try:
            self._batcher = await asyncio.wrap_future(self._thread.start(self.replica.load_and_warm))
            if self._batcher.keep_ahead is not None:  # its pieces' own bound on a streamed row's start, where tighter
                self.stream_target = min(self.stream_target, self._batcher.keep_ahead)
            # systemd hears READY=1 before /readyz answers 200: whoever watches either sees the same order.
            self._systemd.notify("READY=1", "STATUS=serving")
            self.record.ready = True
            self.voice_encoder.start()
            await self._serve()
            await self._drain()
        finally:
            self._systemd.notify("STOPPING=1")
            self.record.stopping = True
            await self.voice_encoder.stop()
            await self.cancels.stop()
            await self.upkeep.stop(self.config.heartbeat_interval_s + 5)
            await self.beats.stop(self.config.heartbeat_interval_s + 5)
            with contextlib.suppress(*REDIS_ERRORS, TimeoutError):
                await asyncio.wait_for(self.heartbeats.remove(self.identity), 2.0)
            server.should_exit = True
            await serving
            self._thread.stop()
            if not self._abandoned:
                self._thread.join(timeout=5.0)
            self._encoder.shutdown(wait=not self._abandoned, cancel_futures=True)
        return not self._abandoned

    # ---- the loop ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        """Claim while the engine has room, hand each job to it, repeat — until a stop is requested."""
        while not self._stop.is_set():
            room, new = self._free_room()
            self._room.clear()  # before the claim: a step that ends while it waits on Redis still wakes the loop
            jobs = await self.claims.take(room, new) if room > 0 else []
            if not jobs and (room <= 0 or new <= 0):  # nothing it may claim now: the next step may change that
                await self._room.wait()
                continue
            await self._start(jobs)

    def _free_room(self) -> tuple[int, int]:
        """How many more jobs to claim now, and how many of them may start new streams: none while a job that must run
        alone is in hand, until its outcome is stored (if it takes the process down, nothing else goes with it) or while
        a batch of rows already waits for slots, else up to :data:`_ROOM_PER_SLOT` jobs per slot in hand (a job may bring
        several rows); with stream admission on, no more new streams than the stream room
        (:mod:`ttsq.runtime.stream_admission`): none while a stream it plays is short of its margin (its listener's
        account, :func:`~ttsq.runtime.stream_admission.slack_of`). A continuation of a stream already playing is no new
        stream: only the batch's room bounds it."""
        batcher = self._batcher
        if batcher is None or self._alone:
            return 0, 0
        limit = batcher.slot_limit
        self.metrics.batch_limit.set(limit)
        if batcher.waiting_rows >= limit:
            return 0, 0
        room = _ROOM_PER_SLOT * limit - len(self._in_flight)
        rows = batcher.active_rows + batcher.waiting_rows
        now, jobs, slack = self.clock(), len(self._in_flight), None
        heard = [flight.listener for flight in self._in_flight.values() if flight.job.params.listened]
        if self.config.stream_admission_slack:
            slack = slack_of(heard, now, self.config.playback_margin_s)
        streams = len(heard)  # a job nobody listens to is no stream starting: it never plays
        return room, self.stream_admission.claim_limit(
            room, self.stream_target, rows, jobs, slack=slack, now=now, streams_in_hand=streams
        )

    async def _start(self, jobs: list[Job]) -> None:
        """Claimed jobs' first moves: answered from the cache if an identical one finished meanwhile,
        else into the engine (alone, if its last worker was lost while running it). The jobs claimed
        together reach the engine together (no await between them), so they start in one step.

        A job whose record did not load (:attr:`Job.unreadable`: another release wrote it) is failed for good with
        that reason, through the one failure path (its owner's count, webhook, stream end, dead letter, metrics);
        the jobs claimed with it go on: one such record must not take its batch, or the worker, down with it."""
        if not jobs:
            return
        claimed_at = time.perf_counter()
        self._running.update((job.id, token(job)) for job in jobs)
        for job in jobs:
            if job.unreadable is not None:
                self._spawn(self.outcomes.settle(job, Failure(UnreadableJob(job.unreadable)), claimed_at))
        jobs = [job for job in jobs if job.unreadable is None]
        self._alone.update(job.id for job in jobs if job.isolate)
        jobs = [job for job in jobs if not self._adopted(job)]
        hits = await asyncio.gather(*(self._from_cache(job) for job in jobs))
        with self._thread.together():  # one command: the engine takes the claim's requests at once
            for job, hit in zip(jobs, hits, strict=True):
                if job.cancel_requested:
                    # Cancelled while an earlier attempt ran (its worker then died): ended now, not synthesised again.
                    self.metrics.cancels.labels("claim").inc()
                    self._spawn(self.outcomes.settle(job, Failure(CancelledWhileRunning("cancelled while it ran")), claimed_at))
                    continue
                if hit is not None:
                    self._spawn(self.outcomes.settle(job, Synthesised(hit, busy_s=0.0, from_cache=True), claimed_at))
                    continue
                parts = job.params.parts()
                spoken = [part for part in parts if not part.silent]
                if not spoken:
                    self._spawn(self.outcomes.settle(job, Failure(PermanentError("the job has nothing to speak")), claimed_at))
                    continue
                audio = JobAudio.of(parts, keep=not job.params.document)
                flight = self._in_flight[job.id] = _InFlight(job, claimed_at=claimed_at, audio=audio, cue=stream_cue(job))
                if flight.cue is not None:
                    flight.listener = self.streams_heard.listener(flight.cue, self.clock())
                if job.params.refine_only:
                    flight.refined = RefinedChunks()
                if job.isolate:
                    # It may be what killed its last worker: it shares no step with another job until it succeeds once.
                    log.info("%s runs alone: its worker was lost during its last attempt", job.id)
                    self.metrics.isolated.inc()
                if job.params.document:  # a few parts at a time, after what an earlier attempt published (an await)
                    flight.feed = DocumentFeed(job.id, spoken, self.config.document_parts_in_flight)
                    self._spawn(self._start_document(flight, len(parts)))
                    continue
                # One request per part (a dialogue's lines): each its own voice and sampling, all sharing the engine's steps.
                for part in spoken:
                    self._add_part(flight, part)

    def _add_part(self, flight: _InFlight, part: Part) -> None:
        flight.keys.append(part_key(flight.job.id, part.number))
        request = functools.partial(part_request, flight.job.params, part, self.speakers, flight.cue)
        self._thread.add(flight.keys[-1], request, alone=flight.job.isolate)

    async def _start_document(self, flight: _InFlight, parts: int) -> None:
        """A document's first parts into the engine: from the first one its stream does not hold whole (an earlier
        attempt's, :mod:`ttsq.runtime.documents`). If its stream cannot be read, the attempt fails to run again."""
        job = flight.job
        try:
            first = await resume(self.streams, job, flight.audio, parts) if job.attempts > 1 else 0
        except REDIS_ERRORS as exc:
            if self._in_flight.get(job.id) is flight:
                self._end(job.id, Failure(TransientError(f"its earlier attempts' audio could not be read: {exc}")))
            return
        if self._in_flight.get(job.id) is not flight:
            return  # cancelled or taken back meanwhile
        self.metrics.document_parts_kept.inc(first)
        if flight.audio.complete:  # every part was published: only its outcome was not stored
            del self._in_flight[job.id]
            await self._finish(flight)
        elif flight.feed is not None:
            for part in flight.feed.start(first):
                self._add_part(flight, part)

    def _adopted(self, job: Job) -> bool:
        """Whether ``job`` was claimed again while this worker's earlier, lapsed claim on it is still in the engine
        (the worker stalled past its lease, the sweep requeued the job and nobody else took it): the synthesis
        under way is that job's, so it goes on under the new claim — its outcome is stored with the new token —
        instead of starting the job a second time beside itself."""
        flight = self._in_flight.get(job.id)
        if flight is None:
            return False
        log.warning(
            "%s claimed again (claim %d) while its lapsed claim %d still runs here: that synthesis goes on under the new claim",
            job.id,
            token(job),
            token(flight.job),
        )
        flight.job = job
        return True

    async def _from_cache(self, job: Job) -> CachedAudio | None:
        """An identical job may have finished since this one was queued (e.g. on another worker)."""
        if self.cache is None or job.params.cache_key is None:
            return None
        return await self.cache.get(job.params.cache_key)

    async def _drain(self) -> None:
        """After a stop request: let the jobs in hand finish, until the grace period is over."""
        while self._in_flight or self._tasks:
            if self._past_grace():
                log.warning("grace period over: leaving %d job(s) to the sweep", len(self._running))
                self._abandoned = True
                for task in list(self._tasks):
                    task.cancel()
                return
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), 0.2)

    # ---- what the engine reports ------------------------------------------------------------

    def _report_from_thread(self, report: StepReport) -> None:
        """Called in the inference thread after each step: hand the report to the event loop."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_step, report)

    def _on_step(self, report: StepReport) -> None:
        self._last_step_at = time.monotonic()
        if report.rows:
            self.step_cost.observe(report.rows, report.cost_s)  # the audio and prefill threads' time counted in
            self.metrics.stream_capacity.set(self.step_cost.real_time_rows(self.stream_target) or 0)
            self.metrics.inference.observe(report.seconds)
            self.metrics.batch_size.observe(report.rows)
            self.record.batches += 1
            self.record.largest_batch = max(self.record.largest_batch, report.rows)
        self.replica.count_out_of_memory(self._batcher)
        if report.broken is not None:
            for job_id in list(self._in_flight):
                self._end(job_id, Failure(TransientError(f"the engine failed: {report.broken}")))
        for event in report.events:
            job_id, part = parts_of_key(event.key, self._in_flight)
            flight = self._in_flight.get(job_id)
            if flight is None:
                continue  # a job that ended already (failed, or left to the sweep)
            if isinstance(event, RequestFailed):
                self._end(job_id, Failure(event.error))
                continue
            if flight.refined is not None:  # a refine job: its chunks are text, stored once all have come
                flight.refined.add(event.chunk)
                if flight.refined.complete:
                    busy_s = time.perf_counter() - flight.claimed_at
                    self._end(job_id, Synthesised(flight.refined.result(), busy_s=busy_s))
                continue
            if isinstance(event, PieceReady):
                released = flight.audio.add_piece(event.chunk, part)
            else:
                released = flight.audio.add(event.chunk, part)
                self.metrics.chunks.inc()
                if flight.feed is not None:
                    for added in flight.feed.ended(part, event.chunk.total):
                        self._add_part(flight, added)
            for release in released:
                if release.samples.size and flight.job.params.listened:  # nobody hears a job nobody listens to
                    heard(flight.listener, self.clock(), release.samples.size / SAMPLE_RATE, self.metrics)
                # A one-chunk job decoded whole has nothing to stream ahead of its result; one decoded in pieces has.
                if release.total > 1 or flight.audio.pieced or flight.feed is not None:  # a document's stream is its audio
                    pcm = encode_audio(release.samples, "pcm") if release.samples.size else b""
                    cue = _cue(flight.audio.timings[release.index]) if release.final else None
                    flight.stream((release, pcm, cue), self.outcomes.publish)
            if flight.audio.complete:
                del self._in_flight[job_id]
                self._spawn(self._finish(flight))
        self._room.set()

    def _cancelled_while_running(self, job_id: str) -> None:
        """Its rows leave the engine now (their slots take other rows at the next step) and the job ends as cancelled."""
        if job_id in self._in_flight:
            self._end(job_id, Failure(CancelledWhileRunning("cancelled while it ran")))

    def _taken_back(self, job_id: str) -> None:
        """The sweep took this job's claim back while this worker's heartbeat had lapsed (it runs again, perhaps
        elsewhere): its rows leave the engine, its audio stops, and nothing of it is stored — every write under the
        old claim would be refused anyway. A job claimed again here meanwhile holds a newer claim and is not dropped."""
        flight = self._in_flight.pop(job_id, None)
        if flight is not None:
            self._leave_engine(flight)
            if flight.pieces is not None and flight.publisher is not None:
                flight.pieces.put_nowait(None)
                self._spawn(flight.publisher)
        self._running.pop(job_id, None)
        self._alone.discard(job_id)
        self._room.set()

    def _end(self, job_id: str, outcome: Outcome) -> None:
        """The job ends before its audio is complete: every request of it still in the engine leaves it (a part that
        failed takes the job's other parts with it), and its outcome is stored."""
        flight = self._in_flight.pop(job_id)
        self._leave_engine(flight)
        self._spawn(self._settle_flight(flight, outcome))

    def _leave_engine(self, flight: _InFlight) -> None:
        for key in flight.keys:
            self._thread.cancel(key)

    async def _finish(self, flight: _InFlight) -> None:
        """All of a job's chunks ended: encode its audio (off the loop) and store it. A document's audio is its
        stream's: its result records its length and captions (:mod:`ttsq.runtime.documents`)."""
        if flight.job.params.document:
            await self._settle_flight(flight, document_outcome(flight.audio, flight.job.params, flight.claimed_at))
            return
        samples = flight.audio.samples()
        if samples.size == 0:
            await self._settle_flight(flight, Failure(TransientError("model produced no audio")))
            return
        audio = await asyncio.get_running_loop().run_in_executor(self._encoder, _encoded, samples, flight.job.params.format)
        audio = replace(audio, captions=flight.audio.captions(flight.job.params))
        busy_s = time.perf_counter() - flight.claimed_at
        await self._settle_flight(flight, Synthesised(audio, busy_s=busy_s, first_audio_at=flight.audio.first_audio_at))

    async def _settle_flight(self, flight: _InFlight, outcome: Outcome) -> None:
        if flight.pieces is not None and flight.publisher is not None:
            flight.pieces.put_nowait(None)
            await flight.publisher
        await self.outcomes.settle(flight.job, outcome, flight.claimed_at)
        self.replica.after_job(isinstance(outcome, Failure) and isinstance(outcome.error, OutOfMemory))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("storing a job's outcome failed", exc_info=task.exception())
        self._room.set()

    def _redis_changed(self, ok: bool) -> None:
        self.record.redis_ok = ok


def _encoded(samples: npt.NDArray[np.float32], fmt: AudioFormat) -> CachedAudio:
    return CachedAudio(encode_audio(samples, fmt), CONTENT_TYPES[fmt], duration_s(samples))


def _cue(timing: tuple[int, int, str, int]) -> tuple[int, int, str]:
    """A chunk's live caption (``timing`` event): its place in the joined audio and its text as the stored cue has it."""
    start, end, text, _part = timing
    return start, end, spoken_text(text)
