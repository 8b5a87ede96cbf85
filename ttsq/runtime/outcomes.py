"""A job's outcome, from the worker to Redis: its audio published to its stream as it comes, its result (and cache
entry) or its failure stored, through a Redis outage, fenced by its claim.

The worker's loop decides *when* a job has ended (:mod:`ttsq.runtime.worker`); this module owns *what is written*
then, and what a write refused for a stale claim means. :class:`Outcomes` keeps the worker's in-hand claims (shared
with it, so a stored outcome ends the lease renewal) and the stores failing now (``/readyz`` fails meanwhile).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ttsq.domain import context
from ttsq.domain.jobs import Job, TTSParams
from ttsq.inference.base import InferenceError, OutOfMemory
from ttsq.inference.playback import Listener
from ttsq.inference.stream_listeners import StreamCue
from ttsq.runtime.assembly import Release
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.runtime.upkeep import REDIS_ERRORS, RedisOutage, describe
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed, Failed
from ttsq.store.streams import AudioStreams

__all__ = [
    "CancelledWhileRunning",
    "Failure",
    "Outcome",
    "Outcomes",
    "Piece",
    "Synthesised",
    "UnreadableJob",
    "failure_reason",
    "heard",
    "token",
]

log = logging.getLogger("ttsq.runtime.worker")  # the worker's story, one logger: a job's lines read in order

T = TypeVar("T")
Piece = tuple[Release, bytes, tuple[int, int, str] | None]
"""One streamed piece: what it is (chunk, place in the joined audio, whether its chunk ends with it), its PCM16 bytes,
and at its chunk's end (speech start, end in the joined audio in samples, text), its caption."""


@dataclass(frozen=True)
class Synthesised:
    """A job's audio, ready to store; ``busy_s`` is how long it was in the engine (claim to last chunk)."""

    audio: CachedAudio
    busy_s: float
    from_cache: bool = False
    first_audio_at: float | None = None
    """``time.perf_counter()`` when the job's first chunk of audio existed."""


@dataclass(frozen=True)
class Failure:
    error: BaseException


Outcome = Synthesised | Failure


class CancelledWhileRunning(Exception):
    """A caller cancelled the job while it ran; the worker stopped its work (``fail`` ends it as cancelled)."""


class UnreadableJob(Exception):
    """The claimed job's record does not load as it is (:attr:`Job.unreadable`, the message): no attempt could run
    it, on any worker of this release, so it fails for good, saying why."""


def failure_reason(error: BaseException) -> tuple[str, bool]:
    """How a failure is recorded on the job, and whether another attempt may succeed."""
    if isinstance(error, CancelledWhileRunning | UnreadableJob):
        return str(error), False
    if isinstance(error, OutOfMemory):
        return f"out of memory: {error}", True
    if isinstance(error, InferenceError):
        return f"{'inference failed' if error.retryable else 'invalid job'}: {error}", error.retryable
    return f"inference failed: {type(error).__name__}: {error}", True


def stream_cue(job: Job) -> StreamCue | None:
    """The engine's view of a claimed job's place in a stream (``params.stream``), or None: the audio its listener had
    left at the claim is what the API counted at the job's queueing less the time it waited, both ends by Redis's clock
    (``created_at``, ``started_at``), so no host's clock enters."""
    place = job.params.stream
    if place is None:
        return None
    waited = job.started_at - job.created_at if job.started_at is not None else 0.0
    return StreamCue(place.id, place.continues, place.buffered_s - waited)


def heard(listener: Listener, now: float, seconds: float, metrics: WorkerMetrics) -> None:
    """A piece of ``seconds`` of a job's audio is handed on at ``now``: its listener's slack, and an underrun if it
    ran dry."""
    slack = listener.deliver(now, seconds)
    if slack is not None:
        metrics.slack.observe(slack)
        if slack < 0:
            metrics.underruns.inc()


class Outcomes:
    """Writes jobs' outcomes for one worker (see the module docstring)."""

    def __init__(
        self,
        queue: JobQueue,
        streams: AudioStreams,
        cache: ResultCache | None,
        metrics: WorkerMetrics,
        record: HeartbeatRecord,
        outage: RedisOutage,
        *,
        recorded_speaker: Callable[[TTSParams], Awaitable[str | None]],
        running: dict[str, int],
        alone: set[str],
        past_grace: Callable[[], bool],
    ) -> None:
        self.queue = queue
        self.streams = streams
        self.cache = cache
        self.metrics = metrics
        self.record = record
        self.outage = outage
        self.recorded_speaker = recorded_speaker
        """A finished job's speaker, when a voice draw records it (:func:`ttsq.runtime.speakers.recorded_speaker`)."""
        self.running = running
        """The worker's claimed jobs whose outcome is not stored yet, id → fencing token (its upkeep renews them)."""
        self.alone = alone
        """Ids of jobs that must run alone while their outcome is not stored (the worker claims nothing else)."""
        self.past_grace = past_grace
        self.failing_stores: dict[object, str] = {}
        """Stores of job outcomes failing now (each retried by :meth:`_persist`), and why: ``/readyz`` fails meanwhile."""

    async def settle(self, job: Job, outcome: Outcome, claimed_at: float) -> None:
        """Store one job's outcome: its result (and cache entry), or its failure. A Redis outage is retried
        (:meth:`_persist`); anything else that stops the store releases the job (:meth:`_release`)."""
        try:
            with context.working_on(job.id):
                await self._store(job, outcome, claimed_at)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the job must not stay in this worker's hands
            await self._release(job, exc)
        finally:
            # Its lease is released with its outcome: renewing it after that would report it lost. Unless the job was
            # claimed again meanwhile (a stale outcome, refused): the newer claim stays in hand.
            if self.running.get(job.id) == token(job):
                del self.running[job.id]
                self.alone.discard(job.id)

    async def _release(self, job: Job, error: BaseException) -> None:
        """A job whose outcome could not be stored for a reason retrying would not fix (not a Redis outage: those are
        retried until Redis answers) is given back now, as a retryable failure that says why, so it runs again — here
        or on another worker. It used to stay in hand with its lease renewed forever (a job "running" for
        minutes, its worker ready). If even that write fails, the lease is no longer renewed (:meth:`settle`): it
        lapses, and the sweep requeues the job."""
        log.error("  ✗ %s attempt %d: storing its outcome failed; releasing it to run again", job.id, job.attempts, exc_info=error)
        reason = f"storing its outcome failed: {type(error).__name__}: {error}"
        try:
            released = await self.queue.leases.fail(job, reason, retryable=True, cache_key=job.params.cache_key)
        except Exception as exc:  # noqa: BLE001 - the lease lapses instead; the sweep requeues the job
            log.warning("  %s could not be released (%s): its lease lapses, and the sweep requeues it", job.id, describe(exc))
            return
        if released is Failed.RETRY:
            self.metrics.ended("retried", job.attempts)
        elif released is Failed.FAILED:
            self.metrics.ended("failed", job.attempts)
        log.warning("  ✗ %s attempt %d: %s → %s", job.id, job.attempts, reason, released)

    async def _store(self, job: Job, outcome: Outcome, claimed_at: float) -> None:
        if isinstance(outcome, Failure):
            await self._record_failure(job, outcome.error)
            return
        if self.cache is not None and job.params.cache_key is not None and not outcome.from_cache:
            await self.cache.put(job.params.cache_key, outcome.audio)
        result = outcome.audio
        speaker = await self.recorded_speaker(job.params)
        stored = await self._persist(
            lambda: self.queue.leases.complete(
                job,
                result.audio,
                result.content_type,
                result.duration_s,
                outcome.busy_s,
                job.params.cache_key,
                result.captions,
                speaker,
            )
        )
        if stored is Completed.STALE or stored is Failed.STALE:
            self.refused(job, "completion")
            return
        if stored is Completed.CANCELLED:
            self.metrics.ended("cancelled", job.attempts)
            # The audio stays in the result cache (put above): the work is done, and an identical
            # request later is answered from it; the cancelled task itself never gets it.
            log.info("  ⊘ %s cancelled while it ran: its audio is dropped", job.id)
            return
        if stored is Failed.FAILED:
            self.metrics.ended("failed", job.attempts)
            log.warning("  ✗ %s attempt %d: its result is over MAX_RESULT_BYTES → failed", job.id, job.attempts)
            return
        if stored is not Completed.DONE:
            if stored is not None:
                log.info("  ⊘ %s had already ended: this attempt's result is dropped", job.id)
            return
        self.metrics.ended("done", job.attempts)
        self.metrics.audio_seconds.inc(result.duration_s)
        if not outcome.from_cache and result.duration_s > 0:
            self.metrics.rtf.observe(outcome.busy_s / result.duration_s)
        if outcome.first_audio_at is not None:
            self.metrics.first_audio.observe(max(0.0, outcome.first_audio_at - claimed_at))
        self.record.jobs_done += 1
        log.info(
            "%6.2fs ✓ %s attempt %d (%s, %.1fs audio%s)",
            outcome.busy_s,
            job.id,
            job.attempts,
            job.params.format,
            result.duration_s,
            " from the cache" if outcome.from_cache else "",
        )

    async def _record_failure(self, job: Job, error: BaseException) -> None:
        self.record.jobs_failed += 1
        reason, retryable = failure_reason(error)
        leases = self.queue.leases
        outcome = await self._persist(lambda: leases.fail(job, reason, retryable=retryable, cache_key=job.params.cache_key))
        if outcome is Failed.STALE:
            self.refused(job, "failure")
            return
        if outcome is Failed.RETRY:
            self.metrics.ended("retried", job.attempts)
        elif outcome is Failed.FAILED:
            self.metrics.ended("failed", job.attempts)
        elif outcome is Failed.CANCELLED:
            self.metrics.ended("cancelled", job.attempts)
        log.warning("  ✗ %s attempt %d: %s → %s", job.id, job.attempts, reason, outcome)

    async def publish(self, current: Callable[[], Job], pieces: asyncio.Queue[Piece | None]) -> None:
        """Forward a job's audio pieces to its Redis stream: every one, in order, under the job's current claim.

        A listener passes on only audio that continues what it has had (:class:`ttsq.store.streams.AudioCursor`), so a
        piece skipped here would stall every listener of the job at it until the job ends. A piece that cannot be
        published because Redis is away is therefore kept and tried again under the worker's one outage policy
        (:meth:`_persist`: pauses that end as soon as Redis answers, and ``/readyz`` failing meanwhile), and the pieces
        made meanwhile wait behind it in ``pieces``: once Redis is back they land in order. The memory this holds is
        bounded by the job itself: its pieces are its audio as PCM16, half the bytes of the float samples the worker
        keeps for its result anyway, and the job's result is not stored before its last piece has landed
        (``Worker._settle_flight`` waits for this publisher). A retried piece whose first try did land is appended
        twice; listeners skip the repeat by its place (``at``).

        A retried attempt starts the stream afresh; a first attempt has nothing to clear. Every append is fenced by the
        claim (``stream_append.lua``): a stale claim (the job was claimed again after this worker's lease lapsed, e.g.
        while Redis was away) publishes nothing more, and the attempt that replaced it republishes from its first
        piece, which its listeners continue from their own offset. A job this worker claimed again while it ran
        (``Worker._adopted``) publishes on under its new claim. Stopping past the grace period drops what is left: the
        lease lapses and the job runs again.
        """
        # A document's attempts continue one stream: the next goes on after the parts the last one published whole.
        fresh = current().attempts > 1 and not current().params.document
        while (piece := await pieces.get()) is not None:
            published = await self._persist(functools.partial(self._append, current, piece, fresh), "publish a job's audio")
            if published is None:
                log.warning("  %s: its audio could not be published before shutdown; the job runs again", current().id)
                break
            fresh = False
            if not published:
                self.refused(current(), "stream")
                break
        while piece is not None:  # what is left is dropped, so the worker never waits on this queue
            piece = await pieces.get()

    async def _append(self, current: Callable[[], Job], piece: Piece, fresh: bool) -> bool:
        """One try at appending ``piece``, under the job's claim as it is now (an adopted job goes on under its new one)."""
        release, pcm, spoken = piece
        job = current()
        ongoing = not release.final
        return await self.streams.publish(
            job.id,
            token(job),
            release.index,
            release.total,
            pcm,
            fresh=fresh,
            spoken=spoken,
            at=release.at,
            partial=ongoing,
            part=release.part,
            parts_done=release.parts_done,
        )

    # ---- writing outcomes through a Redis outage -------------------------------------------

    async def _persist(self, write: Callable[[], Awaitable[T]], what: str = "store a job outcome") -> T | None:
        """Retry a Redis write through an outage, so finished work is not thrown away.

        Gives up only when stopping past the grace period; the lease then lapses and the
        sweep requeues the job, so it is re-run rather than lost.
        """
        failing = object()

        async def attempt() -> T:
            """One try; while any store is failing, ``/readyz`` says so (the worker's finished work is stuck)."""
            try:
                value = await write()
            except REDIS_ERRORS as exc:
                self.failing_stores[failing] = describe(exc)[:300]
                self.record.store_error = next(reversed(self.failing_stores.values()))
                raise
            self._store_settled(failing)
            return value

        try:
            return await self.outage.persist(attempt, what, give_up=self.past_grace)
        except REDIS_ERRORS as exc:
            log.error("could not %s before shutdown: %s", what, exc)
            return None
        finally:
            self._store_settled(failing)

    def _store_settled(self, store: object) -> None:
        self.failing_stores.pop(store, None)
        self.record.store_error = next(reversed(self.failing_stores.values()), None)

    def refused(self, job: Job, what: str) -> None:
        """The queue refused this worker's write: its claim on ``job`` is stale (fencing). Counted and logged."""
        self.metrics.stale.labels(what).inc()
        log.warning(
            "  ⊘ %s attempt %d: %s refused, claim %d is stale (the lease lapsed and the job was requeued, perhaps "
            "claimed by another worker); nothing of this attempt was applied",
            job.id,
            job.attempts,
            what,
            token(job),
        )


def token(job: Job) -> int:
    """A claimed job's fencing token (``claim.lua`` sets it on every claim)."""
    if job.claim is None:
        raise ValueError(f"job {job.id} was not claimed: it carries no claim token")
    return job.claim
