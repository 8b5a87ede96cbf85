"""The reliable job queue: the only code that speaks Redis commands about jobs.

Design (the "reliable queue" pattern):

* **enqueue** records the job (``SET NX``) and ``LPUSH``-es its id in one script, so a retried
  enqueue (a lost reply, a client retry) never creates a second job.
* **claim** moves an id with ``BLMOVE`` from the queue into a processing list, then a script
  counts the attempt, marks the job running and grants a *lease*: a deadline in the ``leases``
  sorted set. The worker moves its deadlines forward while inference runs.
* **sweep** (one worker per interval, under a short lock): a job whose lease deadline has passed
  belonged to a dead worker and goes back to the front of the queue; so does an id that was
  claimed but never started; retries whose backoff is over are released. Attempts are counted at
  claim time, so a job that kills its worker every time is dead-lettered after ``max_attempts``.
* **complete / fail** write the result and the final status with an expiry; a queued or running
  job has no expiry and never vanishes while it waits. Failed jobs keep their final record in a
  capped dead-letter list. Retryable failures retry after ``retry_base_s ** attempt`` seconds.

Every state change is one Lua script (``ttsq/store/lua/*.lua``), so a crash between two commands
cannot leave a job half-moved; every script reply comes back as a named Python type. Time comes
from an injectable clock (``time.time`` by default), so lease expiry and backoff can be tested
without sleeping; workers' clocks are assumed to agree to well within a lease (NTP).
Blocking reads are kept short (``block_s`` < the socket timeout) and are never cancelled
mid-flight, because a cancelled BLMOVE reply would leave an id in limbo until swept.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from importlib.resources import files
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from ttsq.domain.jobs import Job, Status, TTSParams
from ttsq.store.keys import Keys
from ttsq.store.rate_limit import Charge, RateDecision, RateLimitExceeded, token_bucket_lua

log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Unix seconds; ``time.time`` in production, a settable value in tests."""

DEFAULT_JOB_S = 5.0
"""The wait estimate per job before any job has finished."""

_PROMOTE_LIMIT = 1000
"""Most retries released per sweep (the rest wait one interval)."""


@dataclass(frozen=True)
class QueueConfig:
    """Queue limits and timings. Built from settings by ``settings.py``, which also validates them."""

    namespace: str
    lease_s: float
    max_attempts: int
    result_ttl_s: int
    max_result_bytes: int
    max_queue_depth: int
    block_s: float
    retry_base_s: float
    heartbeat_ttl_s: int
    dead_letter_max: int


class QueueFullError(Exception):
    """The queue holds ``max_queue_depth`` jobs or more; the client should come back later."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"the queue is full ({depth} jobs waiting); try again later")
        self.depth = depth


class OwnerQueueFullError(QueueFullError):
    """One API key (or client) has its own cap of jobs queued or running, so it cannot fill the shared queue."""

    def __init__(self, owned: int, cap: int) -> None:
        Exception.__init__(
            self, f"this key already has {owned} jobs queued or running, its limit (MAX_QUEUED_PER_KEY={cap}); try again later"
        )
        self.depth = owned
        self.cap = cap


# ---- what the scripts answer, as named types ------------------------------------------------


class Enqueued(StrEnum):
    CREATED = "created"
    """A new job was recorded and queued."""
    EXISTS = "exists"
    """A job with this id already exists (a repeated enqueue): nothing changed."""
    JOINED = "joined"
    """An identical job is queued or running (single-flight): nothing new was queued."""
    FULL = "full"
    """The queue is at ``max_queue_depth``."""
    OWNER_FULL = "owner_full"
    """The submitting owner already has ``max_queued_per_owner`` jobs queued or running."""
    LIMITED = "limited"
    """The caller's token bucket was empty (a charged enqueue): nothing was recorded."""


class Started(StrEnum):
    RUN = "run"
    """The attempt is counted and leased to this worker: run it."""
    DEAD = "dead"
    """The job had used up its attempts: it was failed for good and dead-lettered instead."""
    GONE = "gone"
    """The job had already finished or expired."""


class Failed(StrEnum):
    RETRY = "retry"
    """The job waits out its backoff, then runs again."""
    FAILED = "failed"
    """The job failed for good and was dead-lettered."""
    CANCELLED = "cancelled"
    """The job had been cancelled while it ran: it ends cancelled, not retried."""
    GONE = "gone"
    """The job had already finished or expired; nothing changed."""


class Completed(StrEnum):
    DONE = "done"
    CANCELLED = "cancelled"
    """The job had been cancelled while it ran: its audio was dropped."""
    GONE = "gone"
    """The job had already finished (e.g. a requeued copy ran elsewhere) or expired."""


class Cancelled(StrEnum):
    CANCELLED = "cancelled"
    """It was waiting and left the queue (or was cancelled already)."""
    CANCELLING = "cancelling"
    """It is running: its result will be dropped when its batch ends."""
    DETACHED = "detached"
    """Other readers still want it (single-flight): it goes on for them, without this reader."""
    FINAL = "final"
    """It had already finished (done or failed): nothing to cancel."""
    GONE = "gone"


class Requeued(StrEnum):
    REQUEUED = "requeued"
    MISSING = "missing"
    """No dead letter with that id (never, already requeued, purged, or trimmed off the capped list)."""
    ACTIVE = "active"
    """Its task is queued, running or done again: nothing changed."""


@dataclass(frozen=True)
class EnqueueResult:
    job: Job
    outcome: Enqueued
    position: int | None
    estimate_s: float
    rate: RateDecision | None = None
    """The caller's token bucket after paying for this submit (when a charge was given)."""

    @property
    def joined(self) -> bool:
        return self.outcome is Enqueued.JOINED


@dataclass(frozen=True)
class Claim:
    """A claimed job: runnable, or dead-lettered by the claim itself (it had no attempts left)."""

    job: Job
    started: Started

    @property
    def runnable(self) -> bool:
        return self.started is Started.RUN


@dataclass(frozen=True)
class QueueSnapshot:
    """How the pool stands, in one round trip (for metrics)."""

    queued: int
    processing: int
    delayed: int
    dead_letters: int
    live_workers: int


@dataclass(frozen=True)
class SweepReport:
    swept: bool
    """False when another worker holds this interval's sweep lock."""
    requeued: int = 0
    """Running jobs whose lease had lapsed."""
    orphans: int = 0
    """Ids claimed but never started."""
    promoted: int = 0
    """Retries whose backoff was over."""


# ---------------------------------------------------------------------------------------------


def _lua(name: str) -> str:
    return files("ttsq.store").joinpath("lua", f"{name}.lua").read_text()


def _script(redis: Redis, name: str, *, ends_jobs: bool = False) -> AsyncScript:
    """A script from ``lua/``; one that can end a job gets ``finish.lua`` (owner count, webhook) in front."""
    return redis.register_script((_lua("finish") + "\n" if ends_jobs else "") + _lua(name))


def _estimate(position: int, average_job_s: float, live_workers: int) -> float:
    return round((position + 1) * average_job_s / max(1, live_workers), 1)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flag(value: bool) -> str:
    return "1" if value else "0"


class JobQueue:
    """Queue semantics over one Redis connection pool (``decode_responses=False``)."""

    def __init__(self, redis: Redis, config: QueueConfig, clock: Clock = time.time) -> None:
        self.redis = redis
        self.config = config
        self.clock = clock
        self.keys = Keys(config.namespace)
        self._enqueue = redis.register_script(token_bucket_lua() + "\n" + _lua("enqueue"))
        self._start = _script(redis, "start", ends_jobs=True)
        self._renew = _script(redis, "renew")
        self._complete = _script(redis, "complete", ends_jobs=True)
        self._fail = _script(redis, "fail", ends_jobs=True)
        self._cancel = _script(redis, "cancel", ends_jobs=True)
        self._sweep = _script(redis, "sweep")
        self._take = _script(redis, "take")
        self._requeue_dead = _script(redis, "requeue_dead")
        self._clear_inflight = _script(redis, "clear_inflight")
        self._task_id_secret: bytes | None = None
        self._secret_kept_at = float("-inf")

    def _inflight_key(self, cache_key: str | None) -> str:
        """The job's single-flight marker; jobs without a cache key get a placeholder the scripts never touch."""
        return self.keys.inflight(cache_key or "-")

    # ---- producer side -------------------------------------------------------------------

    async def enqueue(
        self,
        job_id: str,
        params: TTSParams,
        *,
        single_flight: bool,
        owner: str | None = None,
        reader: str | None = None,
        max_per_owner: int = 0,
        charge: Charge | None = None,
    ) -> EnqueueResult:
        """Record and queue a job; calling it again with the same id changes nothing.

        With a ``charge`` the caller's token bucket pays first, in the same script; an empty bucket
        raises :class:`~ttsq.store.rate_limit.RateLimitExceeded` and records nothing.

        Single-flight: when ``params.cache_key`` is set and an identical job is queued or running,
        that job is returned instead (outcome ``JOINED``) and nothing new is queued.
        Raises :class:`QueueFullError` when ``max_queue_depth`` jobs are already waiting, and
        :class:`OwnerQueueFullError` when ``owner`` (an API key or a client address) already has
        ``max_per_owner`` jobs queued or running. ``reader`` (an API key id) may read and cancel
        the job — also when it joins an identical one.
        """
        await self._keep_shared_secret()
        now = self.clock()
        job = Job.model_construct(
            id=job_id,
            params=params,
            max_attempts=self.config.max_attempts,
            created_at=now,
            owner=owner,
            readers=[reader] if reader else None,
            holders=[owner] if owner else None,
        )
        joining = single_flight and params.cache_key is not None
        keys = [
            self.keys.job(job_id),
            self.keys.queue,
            self.keys.stats,
            self.keys.workers,
            self._inflight_key(params.cache_key),
            self.keys.owner_jobs(owner or "-"),
            charge.key if charge is not None else self.keys.rate_limit("-"),
        ]
        stale = ""
        rate: RateDecision | None = None
        for _ in range(3):
            args: list[Any] = [job.model_dump_json(), job_id, self.config.max_queue_depth, _flag(joining), stale]
            args += [now - self.config.heartbeat_ttl_s, self.keys.job_prefix, reader or "", owner or "", max_per_owner]
            # Pay once: a retry after a stale single-flight marker has paid already.
            paying = charge is not None and rate is None
            args += [charge.now, charge.rate_per_s, charge.burst] if paying and charge is not None else [0, "", 0]
            reply = await self._enqueue(keys=keys, args=args)
            outcome = Enqueued(_text(reply[0]))
            if outcome is Enqueued.LIMITED and charge is not None:
                raise RateLimitExceeded(charge.decision(False, int(reply[1]), int(reply[2]), int(reply[3])))
            if paying and charge is not None:
                rate = charge.decision(True, int(reply[-2]), 0, int(reply[-1]))
            if outcome is not Enqueued.JOINED:
                break
            other = await self.get(_text(reply[1]))
            if other is not None and not other.status.is_final:
                position = await self.position(other.id)
                estimate = await self.estimate_wait_s(position or 0)
                return EnqueueResult(job=other, outcome=outcome, position=position, estimate_s=estimate, rate=rate)
            stale = _text(reply[1])
        else:
            raise RuntimeError("single-flight marker kept changing; giving up on this enqueue")
        depth = int(reply[1])
        if outcome is Enqueued.FULL:
            raise QueueFullError(depth)
        if outcome is Enqueued.OWNER_FULL:
            raise OwnerQueueFullError(depth, max_per_owner)
        if outcome is Enqueued.EXISTS:
            job = await self.get(job_id) or job
            estimate = await self.estimate_wait_s(depth)
            return EnqueueResult(job=job, outcome=outcome, position=depth, estimate_s=estimate, rate=rate)
        jobs_done, busy_s, workers = int(reply[2]), float(reply[3]), int(reply[4])
        average = busy_s / jobs_done if jobs_done else DEFAULT_JOB_S
        return EnqueueResult(job=job, outcome=outcome, position=depth, estimate_s=_estimate(depth, average, workers), rate=rate)

    async def record_done(
        self, job_id: str, params: TTSParams, audio: bytes, content_type: str, duration_s: float, reader: str | None = None
    ) -> Job:
        """Record a task that is finished on arrival (a cache hit): status and result at once."""
        now = self.clock()
        job = Job(
            id=job_id,
            status=Status.DONE,
            params=params,
            max_attempts=self.config.max_attempts,
            created_at=now,
            finished_at=now,
            duration_s=duration_s,
            content_type=content_type,
            result_bytes=len(audio),
            readers=[reader] if reader else None,
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.result(job_id), audio, ex=self.config.result_ttl_s)
            pipe.set(self.keys.job(job_id), job.model_dump_json(), ex=self.config.result_ttl_s)
            if params.callback_url is not None:  # finished on arrival: its webhook is due at once
                pipe.lpush(self.keys.deliveries, job_id)
            await pipe.execute()
        return job

    async def shared_secret(self) -> bytes:
        """A random secret stored once in Redis, so every API replica signs task ids alike.

        The secret handed out is remembered: a replica keeps signing with it for its whole life, so
        if Redis loses it (restarted without persistence), :meth:`_keep_shared_secret` puts it back,
        and a replica started after the loss adopts it instead of drawing a new one that would make
        the two replicas answer 404 for each other's task ids.
        """
        await self.redis.set(self.keys.task_id_secret, secrets.token_bytes(32), nx=True)
        secret = await self.redis.get(self.keys.task_id_secret)
        if not isinstance(secret, bytes):
            raise RuntimeError("the shared task-id secret vanished from Redis")
        self._task_id_secret = secret
        self._secret_kept_at = self.clock()
        return secret

    async def _keep_shared_secret(self) -> None:
        """Store the secret this replica signs with again if Redis has lost it (at most once a second).

        Runs before every enqueue and readiness check, so after a data loss the replicas that were
        already running restore their common secret as soon as they serve anything. A replica that
        started after the loss and signed ids before any older one came back still disagrees with
        them (its SET NX came first): only a configured ``TASK_ID_SECRET`` rules that out, and the
        log line says so.
        """
        secret, now = self._task_id_secret, self.clock()
        if secret is None or now - self._secret_kept_at < 1.0:
            return
        self._secret_kept_at = now
        if await self.redis.set(self.keys.task_id_secret, secret, nx=True):
            log.warning(
                "Redis had lost the shared task-id secret (restarted without persistence?); stored this replica's again "
                "so that replicas keep accepting each other's task ids (set TASK_ID_SECRET to rule this out)"
            )

    async def get(self, job_id: str) -> Job | None:
        raw = await self.redis.get(self.keys.job(job_id))
        return None if raw is None else Job.model_validate_json(raw)

    async def position(self, job_id: str) -> int | None:
        """Jobs ahead of this one in the queue (0 = next), or None when it is not waiting in line."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpos(self.keys.queue, job_id, rank=-1)
            pipe.llen(self.keys.queue)
            index, length = await pipe.execute()
        if index is None:
            return None
        return int(length) - 1 - int(index)

    async def ping(self) -> None:
        """Raise when Redis is unreachable (readiness); also restores a lost task-id secret (see :meth:`shared_secret`)."""
        await self.redis.ping()
        await self._keep_shared_secret()

    async def depth(self) -> int:
        return int(await self.redis.llen(self.keys.queue))

    async def result(self, job_id: str) -> bytes | None:
        value = await self.redis.get(self.keys.result(job_id))
        return value if isinstance(value, bytes) else None

    async def estimate_wait_s(self, position: int) -> float:
        """Rough seconds until a job at ``position`` is done: the average job time spread over live workers."""
        jobs, busy = await self.redis.hmget(self.keys.stats, ["jobs", "busy_s"])
        average = float(busy or 0) / int(jobs) if jobs and int(jobs) else DEFAULT_JOB_S
        return _estimate(position, average, await self.live_worker_count())

    async def snapshot(self) -> QueueSnapshot:
        """Queue depth, claimed jobs, retries waiting, dead letters and live workers, in one pipeline."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.keys.queue)
            pipe.llen(self.keys.processing)
            pipe.zcard(self.keys.delayed)
            pipe.llen(self.keys.dead)
            pipe.zcount(self.keys.workers, self.clock() - self.config.heartbeat_ttl_s, "+inf")
            queued, processing, delayed, dead, workers = await pipe.execute()
        return QueueSnapshot(int(queued), int(processing), int(delayed), int(dead), int(workers))

    async def dead_letters(self, limit: int = 100) -> list[Job]:
        """The newest dead-lettered jobs' final records, newest first."""
        raw = await self.redis.lrange(self.keys.dead, 0, limit - 1)
        return [Job.model_validate_json(item) for item in raw]

    async def dead_letter(self, job_id: str) -> Job | None:
        """One dead letter's final record (its reason and attempts), or None."""
        return next((job for job in await self.dead_letters(self.config.dead_letter_max) if job.id == job_id), None)

    async def requeue_dead(self, job_id: str) -> Requeued:
        """Put a dead letter back in the queue under its own id (see ``lua/requeue_dead.lua``)."""
        job = await self.dead_letter(job_id)
        owner = job.owner if job is not None and job.owner else "-"
        keys = [
            self.keys.dead,
            self.keys.queue,
            self.keys.job(job_id),
            self.keys.stream(job_id),
            self.keys.delivery_log(job_id),
            self.keys.owner_jobs(owner),
        ]
        reply = await self._requeue_dead(keys=keys, args=[job_id, self.clock()])
        outcome = _text(reply[0])
        if outcome == "requeued":
            log.warning("dead letter %s requeued (position %s)", job_id, int(reply[1]))
        return Requeued(outcome)

    async def purge_dead(self, job_id: str | None = None) -> int:
        """Drop one dead letter (or, with None, all of them); return how many went. Their task
        records still answer "failed" until they expire."""
        if job_id is None:
            count = int(await self.redis.llen(self.keys.dead))
            await self.redis.delete(self.keys.dead)
            return count
        removed = 0
        for raw in await self.redis.lrange(self.keys.dead, 0, -1):
            if Job.model_validate_json(raw).id == job_id:
                removed += int(await self.redis.lrem(self.keys.dead, 0, raw))  # type: ignore[arg-type]  # bytes are fine
        return removed

    # ---- consumer side -------------------------------------------------------------------

    async def claim(self, worker_id: str, block_s: float | None = None) -> Claim | None:
        """Wait up to ``block_s`` for a job, move it to processing and lease it to ``worker_id``."""
        timeout = self.config.block_s if block_s is None else block_s
        # Redis takes fractional block timeouts; redis-py's annotation says int.
        raw_id = await self.redis.blmove(self.keys.queue, self.keys.processing, timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]
        if raw_id is None:
            return None
        job_id = _text(raw_id)
        reply = await self._start(keys=self._start_keys(job_id), args=self._start_args(job_id, worker_id))
        return await self._claim_from(job_id, reply)

    async def claim_more(self, worker_id: str, count: int) -> list[Claim]:
        """Claim up to ``count`` more jobs without blocking (to fill a batch): two round trips, any count.

        Stops before a job marked ``isolate`` (its last worker was lost): that one is left for a
        blocking :meth:`claim`, and the worker runs it alone.
        """
        if count <= 0:
            return []
        taken = await self._take(keys=[self.keys.queue, self.keys.processing], args=[count, self.keys.job_prefix])
        job_ids = [_text(raw) for raw in taken]
        if not job_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                await self._start(keys=self._start_keys(job_id), args=self._start_args(job_id, worker_id), client=pipe)
            replies = await pipe.execute()
        claims = [await self._claim_from(job_id, reply) for job_id, reply in zip(job_ids, replies, strict=True)]
        return [claim for claim in claims if claim is not None]

    def _start_keys(self, job_id: str) -> list[str]:
        return [self.keys.job(job_id), self.keys.leases, self.keys.processing, self.keys.dead]

    def _start_args(self, job_id: str, worker_id: str) -> list[Any]:
        now = self.clock()
        return [
            job_id,
            worker_id,
            now,
            now + self.config.lease_s,
            self.config.result_ttl_s,
            self.config.dead_letter_max,
            self.keys.prefix,
        ]

    async def _claim_from(self, job_id: str, reply: Any) -> Claim | None:
        """The start script's reply as a claim; a job dead-lettered at claim frees its single-flight marker."""
        started = Started(_text(reply[0]))
        if started is Started.GONE:
            return None
        job = Job.model_validate_json(reply[1])
        if started is Started.DEAD:
            log.warning("job %s dead-lettered at claim: %s", job_id, job.error)
            if job.params.cache_key is not None:
                await self._clear_inflight(keys=[self.keys.inflight(job.params.cache_key)], args=[job_id])
        return Claim(job=job, started=started)

    async def renew_leases(self, worker_id: str, job_ids: Iterable[str]) -> set[str]:
        """Move the lease deadline of every job in ``job_ids`` forward; return those no longer held."""
        ids = list(job_ids)
        if not ids:
            return set()
        lost = await self._renew(
            keys=[self.keys.leases, *(self.keys.job(job_id) for job_id in ids)],
            args=[worker_id, self.clock() + self.config.lease_s, *ids],
        )
        return {_text(job_id) for job_id in lost}

    async def complete(
        self, job_id: str, audio: bytes, content_type: str, duration_s: float, busy_s: float, cache_key: str | None
    ) -> Completed | Failed:
        """Store the result and mark the job done (both expire after ``result_ttl_s``).

        ``cache_key`` releases the job's single-flight marker, so later identical requests are
        served from the cache instead of joining a finished job. A result over
        ``max_result_bytes`` fails the job instead (the :class:`Failed` outcome is returned).
        """
        if len(audio) > self.config.max_result_bytes:
            reason = f"result is {len(audio)} bytes; the limit is {self.config.max_result_bytes}"
            return await self.fail(job_id, reason, retryable=False, cache_key=cache_key)
        keys = [
            self.keys.job(job_id),
            self.keys.result(job_id),
            self.keys.leases,
            self.keys.processing,
            self.keys.stats,
            self._inflight_key(cache_key),
        ]
        args: list[Any] = [job_id, audio, self.config.result_ttl_s, self.clock(), duration_s, content_type, busy_s]
        args += [_flag(cache_key is not None), self.keys.prefix]
        return Completed(_text(await self._complete(keys=keys, args=args)))

    async def fail(self, job_id: str, reason: str, *, retryable: bool, cache_key: str | None) -> Failed:
        """Record a failed attempt: retry later with backoff, or fail for good and dead-letter."""
        keys = [
            self.keys.job(job_id),
            self.keys.leases,
            self.keys.processing,
            self.keys.delayed,
            self.keys.dead,
            self._inflight_key(cache_key),
        ]
        args: list[Any] = [
            job_id,
            reason[:2000],
            _flag(retryable),
            self.clock(),
            self.config.retry_base_s,
            self.config.result_ttl_s,
            self.config.dead_letter_max,
            _flag(cache_key is not None),
            self.keys.prefix,
        ]
        reply = await self._fail(keys=keys, args=args)
        return Failed(_text(reply[0]))

    async def cancel(self, job: Job, reader: str | None, holder: str | None = None) -> Cancelled:
        """Cancel ``job`` for the caller — ``reader`` its key id, ``holder`` its owner name (see
        :class:`Cancelled`); calling it again changes nothing."""
        keys = [
            self.keys.job(job.id),
            self.keys.queue,
            self.keys.processing,
            self.keys.delayed,
            self._inflight_key(job.params.cache_key),
            self.keys.stream(job.id),
        ]
        args: list[Any] = [job.id, reader or "", self.clock(), self.config.result_ttl_s, self.keys.prefix, holder or ""]
        reply = await self._cancel(keys=keys, args=args)
        return Cancelled(_text(reply[0]))

    async def sweep(self, interval_s: float, holder: str) -> SweepReport:
        """Requeue lapsed leases and never-started claims, release due retries — unless another
        worker already swept within ``interval_s`` (the lock lasts one interval)."""
        keys = [self.keys.sweep_lock, self.keys.leases, self.keys.processing, self.keys.queue, self.keys.delayed]
        args: list[Any] = [
            self.clock(),
            max(1, int(interval_s * 1000)),
            self.config.lease_s,
            self.keys.job_prefix,
            _PROMOTE_LIMIT,
            holder,
        ]
        reply = await self._sweep(keys=keys, args=args)
        if _text(reply[0]) == "skipped":
            return SweepReport(swept=False)
        report = SweepReport(swept=True, requeued=int(reply[1]), orphans=int(reply[2]), promoted=int(reply[3]))
        if report.requeued or report.orphans:
            log.warning(
                "sweep requeued %d job(s) whose worker stopped renewing its lease and %d claimed but never started",
                report.requeued,
                report.orphans,
            )
        if report.promoted:
            log.info("released %d job(s) whose retry backoff is over", report.promoted)
        return report

    # ---- streaming audio -----------------------------------------------------------------

    async def reset_stream(self, job_id: str) -> None:
        """Start an attempt's audio stream afresh (a retry re-synthesises from the first piece)."""
        await self.redis.delete(self.keys.stream(job_id))

    async def publish_piece(self, job_id: str, index: int, total: int, pcm: bytes) -> None:
        """Append one piece of PCM16 audio; readers see it at once. Expires with the result."""
        await self._append_to_stream(job_id, {"index": index, "total": total, "pcm": pcm})

    async def end_stream(self, job_id: str) -> None:
        await self._append_to_stream(job_id, {"end": 1})

    async def _append_to_stream(self, job_id: str, fields: dict[Any, Any]) -> None:
        key = self.keys.stream(job_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(key, fields)
            pipe.expire(key, self.config.result_ttl_s)
            await pipe.execute()

    async def read_stream(self, job_id: str, after: str, block_ms: int | None) -> list[tuple[str, dict[str, bytes]]]:
        """Pieces after entry id ``after`` ("0" = from the start), waiting up to ``block_ms`` (None: no wait)."""
        reply: Any = await self.redis.xread({self.keys.stream(job_id): after}, count=64, block=block_ms)
        if not reply:
            return []
        return [(_text(entry_id), {_text(k): v for k, v in fields.items()}) for entry_id, fields in reply[0][1]]

    async def progress(self, job_id: str) -> tuple[int, int] | None:
        """(chunks done, chunks total) of the current attempt, or None before the first piece."""
        last: Any = await self.redis.xrevrange(self.keys.stream(job_id), count=2)
        for _entry_id, fields in last:
            if b"total" in fields:
                return int(fields[b"index"]) + 1, int(fields[b"total"])
        return None

    # ---- worker pool health --------------------------------------------------------------

    async def write_heartbeat(self, worker_id: str, record: dict[str, Any]) -> None:
        now = self.clock()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.worker(worker_id), json.dumps(record), ex=self.config.heartbeat_ttl_s)
            pipe.zadd(self.keys.workers, {worker_id: now})
            pipe.zremrangebyscore(self.keys.workers, "-inf", now - 10 * self.config.heartbeat_ttl_s)
            await pipe.execute()

    async def remove_heartbeat(self, worker_id: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.worker(worker_id))
            pipe.zrem(self.keys.workers, worker_id)
            await pipe.execute()

    async def live_worker_count(self) -> int:
        return int(await self.redis.zcount(self.keys.workers, self.clock() - self.config.heartbeat_ttl_s, "+inf"))
