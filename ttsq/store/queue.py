"""The reliable job queue: the only code that writes a job to Redis — its callers' side here (:class:`JobQueue`:
enqueue, cancel, what a caller reads), the workers' side in :mod:`ttsq.store.leases` (:attr:`JobQueue.leases`: claim,
renew, complete, fail, the cancels followed, the sweep), the scripts both load in :mod:`ttsq.store.scripts`.

Design (the "reliable queue" pattern):

* **enqueue** records the job (``SET NX``) and ``LPUSH``-es its id in one script, so a retried
  enqueue (a lost reply, a client retry) never creates a second job.
* **claim** is one script: it moves ids from the queue into a processing list, counts each one's
  attempt, marks it running and grants a *lease* (a deadline in the ``leases`` sorted set) under a
  *fencing token* (the next number of a counter, kept on the job). The worker moves its deadlines
  forward while inference runs; renewing, streaming, completing and failing all name the token, and
  a stale one (the lease lapsed and the job was requeued, perhaps claimed by another worker) is
  refused, so a worker that wakes after a long stall changes nothing. A claim is safe to repeat: the
  script keeps its answer under the caller's request id, so a retry whose first answer was lost gets
  the same jobs, never more; when the queue is empty, the worker waits with a ``BLMOVE`` of the queue
  onto itself, which moves nothing and is harmless to retry.
* **liveness** apart from the lease: every worker beats on every shard every ``HEARTBEAT_INTERVAL_S``
  (:mod:`ttsq.store.heartbeats`), and each claim also enters the job in the worker's own set of claims
  on its shard. A worker whose last beat is older than ``HEARTBEAT_TTL_S`` is dead: the next sweep takes
  back the jobs in its set, seconds after its death rather than a lease after, and fences it (its next
  beat, should it come back, tells it to drop them). A worker busy with a long decode step still beats
  from its event loop and keeps its jobs; the lease is the backstop for one that beats but stopped renewing.
* **sweep** (one worker per interval, under a short lock): a job whose worker's heartbeat has lapsed, or
  whose lease deadline has passed, belonged to a dead worker and goes back to the front of the queue, to
  run alone; so does an id that was claimed but never started; retries whose backoff is over are
  released. Attempts are counted at claim time, so a job that kills its worker every time is
  dead-lettered after ``max_attempts``.
* **cancel** of a running job marks it and announces it on the shard's cancels stream, which every worker
  follows with a blocking read (:meth:`Leases.cancel_notices <ttsq.store.leases.Leases.cancel_notices>`): its worker
  stops the job's rows at the next decode step; the mark stays the record, and lease renewals still report it.
* **complete / fail** write the result and the final status with an expiry; a queued or running
  job has no expiry and never vanishes while it waits. Failed jobs keep their final record in a
  capped dead-letter list. Retryable failures retry after ``retry_base_s ** attempt`` seconds.

Every state change is one Lua script (``ttsq/store/lua/*.lua``), so a crash between two commands
cannot leave a job half-moved; every script reply is read into a named Python type by
:mod:`ttsq.store.replies`. An operator's side of the dead letters (read, requeue, purge) is
:mod:`ttsq.store.dead_letters`, and what is only counted (the wait estimate, the snapshot, per-tenant depths)
:mod:`ttsq.store.queue_stats`. What lives beside the jobs has modules of its own: a job's audio stream
(:mod:`ttsq.store.streams`), the workers' heartbeats (:mod:`ttsq.store.heartbeats`) and the shared
task-id secret (:mod:`ttsq.store.task_ids`); two webhook scripts read a job's key without changing
it (``deliveries_lease.lua``: does the task still exist; ``deliveries_settle.lua``: how long it has
left). Time is Redis's own (``TIME`` inside every script that
keeps time, :mod:`ttsq.store.clock`): leases, backoffs, the sweep's judgements and the rate limit
never depend on a host's clock, however far apart the hosts drift. Tests pin the clock instead, so a
lease lapses or a backoff ends exactly when they advance it, without sleeping.
Blocking reads are kept short (``block_s`` < the socket timeout).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript

from ttsq.domain.captions import Cue
from ttsq.domain.jobs import ANONYMOUS_TENANT, Job, Priority, Status, TTSParams
from ttsq.store.clock import Clock, RedisClock, clock_lua
from ttsq.store.connection import (
    NotReplicatedError,
    RedisClient,
    ReplicaCount,
    Replication,
    SubmitWaitReplicas,
)
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.keys import Keys, Shards
from ttsq.store.leases import Leases
from ttsq.store.queue_stats import DEFAULT_JOB_S, QueueStats, estimate_s
from ttsq.store.rate_limit import Charge, RateDecision, RateLimitExceeded, charge_script, token_bucket_lua
from ttsq.store.replies import (
    Cancelled,
    Enqueued,
    EnqueueReply,
    TokenTaken,
    text,
)
from ttsq.store.scripts import ending_keys, flag, home_queue, inflight_key, lanes, lua, lua_script

log = logging.getLogger(__name__)


_CANCELS_KEPT = 1000
"""About how many entries each shard's cancels stream keeps: a worker that falls further behind (it could not reach
Redis meanwhile) learns of the older cancels at its next lease renewal instead."""


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
    heartbeat_ttl_s: float
    """``HEARTBEAT_TTL_S``: a worker whose last beat is older is not live, and the sweep takes its claims back."""
    dead_letter_max: int
    shards: int
    """Queue shards (``QUEUE_SHARDS``): N queues, each on its own hash tag (:class:`ttsq.store.keys.Shards`)."""
    submit_wait_replicas: SubmitWaitReplicas
    """Replicas a new task must reach before it is acknowledged (``WAIT``); 0 = do not wait; ``auto``: every replica the
    primary has been seen with (:class:`~ttsq.store.connection.Replication`)."""
    submit_wait_timeout_ms: int
    submit_wait_replicas_check_s: float
    """``auto``: how often a primary not yet seen with a replica is looked at again (``INFO replication``)."""
    interactive_burst: int
    """``INTERACTIVE_BURST``: interactive claims in a row while batch jobs wait, before one batch claim (so a batch
    backlog gets at least one claim in ``interactive_burst + 1``; docs/fairness.md)."""


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


class JobQueue:
    """Queue semantics over one Redis connection pool (``decode_responses=False``), on ``config.shards`` shards.

    A job lives whole on one shard, named by its id (:meth:`Shards.of`); the API places a new job by its cache
    key (:meth:`Shards.place`), so identical requests meet on one shard (single-flight, the cache). Workers claim
    from every shard in turn, the sweep and the dead letters cover every shard, and what is counted (depth, dead
    letters, the snapshot) is summed over them. The depth cap and the per-owner cap hold per shard, each a
    ``1/shards`` share of the whole (rounded up).
    """

    def __init__(self, redis: RedisClient, config: QueueConfig, clock: Clock | None = None) -> None:
        self.redis = redis
        self.config = config
        self.shards = Shards(config.namespace, config.shards)
        self.keys = self.shards.home
        """Shard 0, the home shard: also where what is one per deployment lives (voices, API keys, the task-id secret)."""
        self.clock = RedisClock(redis, clock, self.keys.stats)
        """Redis's clock (a test may pin it): every deadline's."""
        self._enqueue = redis.register_script("\n".join([clock_lua(), token_bucket_lua(), lua("fair"), lua("enqueue")]))
        self._record_done = lua_script(redis, "record_done", timed=False)
        self.replication = Replication(
            redis, config.submit_wait_replicas, config.submit_wait_timeout_ms, config.submit_wait_replicas_check_s
        )
        """How many replicas an acknowledging write waits for, and whether the primary has them (readiness)."""
        self._charge = charge_script(redis)
        self._cancel = lua_script(redis, "cancel", ends_jobs=True, fair=True)
        self._position = lua_script(redis, "position", timed=False, fair=True)
        self.stats = QueueStats(redis, self.shards, Heartbeats(redis, self.shards, config.heartbeat_ttl_s, self.clock))
        """What is counted of the queue (the wait estimate an enqueue answers with, the metrics' snapshot)."""
        self.leases = Leases(redis, config, self.shards, self.clock)
        """The workers' side: claims under fenced leases, their renewal, each job's ending, the cancels, the sweep."""

    def _share(self, cap: int) -> int:
        """A shard's share of a cap over the whole queue."""
        return max(1, math.ceil(cap / self.shards.count)) if cap else cap

    # ---- a caller's submit, and what it reads ---------------------------------------------------

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
        tenant: str = ANONYMOUS_TENANT,
        priority: Priority = "interactive",
        weight: int = 1,
    ) -> EnqueueResult:
        """Record and queue a job on the shard its id names; calling it again with the same id changes nothing.

        With a ``charge`` the caller's token bucket pays first: in the same script when the job goes to the home
        shard (where the buckets are), else in a script of its own just before. An empty bucket raises
        :class:`~ttsq.store.rate_limit.RateLimitExceeded` and records nothing.

        Single-flight: when ``params.cache_key`` is set and an identical job is queued or running,
        that job is returned instead (outcome ``JOINED``) and nothing new is queued.
        Raises :class:`QueueFullError` when the shard holds its share of ``max_queue_depth`` jobs, and
        :class:`OwnerQueueFullError` when ``owner`` (an API key or a client address) already has its share
        of ``max_per_owner`` jobs queued or running there. ``reader`` (an API key id) may read and cancel
        the job — also when it joins an identical one.

        Fair queuing (docs/fairness.md): the job waits in ``tenant``'s queue of its lane (:attr:`Job.lane`: its
        ``priority``'s, or ``continuation`` for an interactive job continuing a live stream), and ``weight``
        (the tenant's claims per round-robin turn) is recorded for the shard's round robin. The position answered
        is an estimate of the claims before it in that order.
        """
        keys_of = self.shards.of(job_id)
        job = Job.model_construct(
            id=job_id,
            params=params,
            max_attempts=self.config.max_attempts,
            created_at=time.time(),  # this copy's only: the stored record takes Redis's time (enqueue.lua)
            owner=owner,
            readers=[reader] if reader else None,
            holders=[owner] if owner else None,
            tenant=tenant,
            priority=priority,
        )
        rate: RateDecision | None = None
        if charge is not None and keys_of is not self.keys:
            rate = await self._pay_apart(charge)
            charge = None
        joining = single_flight and params.cache_key is not None
        lane = job.lane
        keys = [
            keys_of.job(job_id),
            keys_of.queue,
            keys_of.stats,
            keys_of.workers,
            inflight_key(keys_of, params.cache_key),
            keys_of.owner_jobs(owner or "-"),
            charge.key if charge is not None else keys_of.rate_limit("-"),
            keys_of.tenant_queue(lane, tenant),
            keys_of.ring(lane),
            keys_of.weights,
        ]
        stale = ""
        for _ in range(3):
            args: list[Any] = [job.model_dump_json(), job_id, self._share(self.config.max_queue_depth), flag(joining), stale]
            args += [self.config.heartbeat_ttl_s, keys_of.job_prefix, reader or "", owner or "", self._share(max_per_owner)]
            # Pay once: a retry after a stale single-flight marker has paid already.
            paying = charge is not None and rate is None
            args += [charge.clock, charge.rate_per_s, charge.burst] if paying and charge is not None else [self.clock.arg(), "", 0]
            args += [tenant, lane, weight, keys_of.fair_prefix, self.config.interactive_burst]
            reply = EnqueueReply.parse(await self._acknowledged(self._enqueue, keys, args, job_id))
            if reply.outcome is Enqueued.LIMITED and charge is not None and reply.bucket is not None:
                raise RateLimitExceeded(charge.decision(reply.bucket))
            if paying and charge is not None and reply.bucket is not None:
                rate = charge.decision(reply.bucket)
            if reply.outcome is not Enqueued.JOINED:
                break
            other = await self.get(reply.other_id) if reply.other_id is not None else None
            if other is not None and not other.status.is_final:
                position = await self.position(other.id)
                estimate = await self.stats.estimate_wait_s(position or 0, keys_of)
                return EnqueueResult(job=other, outcome=reply.outcome, position=position, estimate_s=estimate, rate=rate)
            stale = reply.other_id or ""
        else:
            raise RuntimeError("single-flight marker kept changing; giving up on this enqueue")
        outcome, depth = reply.outcome, reply.depth
        if outcome is Enqueued.FULL:
            raise QueueFullError(depth * self.shards.count)
        if outcome is Enqueued.OWNER_FULL:
            raise OwnerQueueFullError(depth, max_per_owner)
        if outcome is Enqueued.EXISTS:
            job = await self.get(job_id) or job
            position = await self.position(job_id)
            estimate = await self.stats.estimate_wait_s(position or 0, keys_of)
            return EnqueueResult(job=job, outcome=outcome, position=position, estimate_s=estimate, rate=rate)
        average = reply.busy_s / reply.jobs_done if reply.jobs_done else DEFAULT_JOB_S
        estimate = estimate_s(depth, average, reply.live_workers, self.shards.count)
        return EnqueueResult(job=job, outcome=outcome, position=depth, estimate_s=estimate, rate=rate)

    async def _pay_apart(self, charge: Charge) -> RateDecision:
        """Take the caller's token in a script of its own (the job goes to a shard other than the buckets')."""
        reply = await self._charge(keys=[charge.key], args=[charge.clock, charge.rate_per_s, charge.burst])
        decision = charge.decision(TokenTaken.parse(reply))
        if not decision.allowed:
            raise RateLimitExceeded(decision)
        return decision

    async def record_done(
        self,
        job_id: str,
        params: TTSParams,
        audio: bytes,
        content_type: str,
        duration_s: float,
        reader: str | None = None,
        captions: list[Cue] | None = None,
    ) -> Job:
        """Record a task that is finished on arrival (a cache hit): status and result at once, on its id's shard."""
        keys = self.shards.of(job_id)
        now = await self.clock.now()
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
            captions=captions or None,
        )
        deliver = params.callback_url is not None  # finished on arrival: its webhook is due at once
        await self._acknowledged(
            self._record_done,
            [keys.result(job_id), keys.job(job_id), keys.deliveries],
            [audio, job.model_dump_json(), self.config.result_ttl_s, flag(deliver), job_id],
            job_id,
        )
        return job

    async def _acknowledged(self, script: AsyncScript, keys: list[str], args: list[Any], task_id: str) -> Any:
        """Run a script whose answer acknowledges a task (``enqueue.lua``: a new job, or a join of one in flight;
        ``record_done.lua``: a cache hit), followed by ``WAIT`` on the same connection when
        :meth:`Replication.plan <ttsq.store.connection.Replication.plan>` says so (and, with ``auto``, by ``INFO
        replication``, which names the primary the write went to and what it must have reached).

        Redis replicates asynchronously: a primary that is failed over just after answering takes with it what its
        replicas had not received, the acknowledged task included — and during a planned ``SENTINEL FAILOVER`` the
        old primary takes writes for seconds after its replica was promoted, then discards them. ``WAIT n timeout``
        holds the answer until ``n`` replicas have every write this connection made (so the pipeline: the script and
        the ``WAIT`` must share one), or the timeout passes; then :class:`NotReplicatedError` is raised, so no task is
        acknowledged unless it is on ``n`` replicas. The write stands on the primary all the same: if that primary
        survives the job runs, and a client that submits again may have it run twice — never lost once acknowledged,
        at the price of a possible duplicate."""
        replication = self.replication
        wanted = await replication.plan()
        if wanted <= 0:
            return await script(keys=keys, args=args)
        async with self.redis.pipeline(transaction=False) as pipe:
            await script(keys=keys, args=args, client=pipe)  # type: ignore[arg-type]  # queues EVALSHA on the pipeline
            pipe.wait(wanted, self.config.submit_wait_timeout_ms)
            if replication.automatic:
                pipe.info("replication")  # this connection's primary: what it must have reached (Replication.required)
            reply, reached, *info = await pipe.execute()
        required = replication.required(ReplicaCount.of(info[0])) if info else wanted
        if int(reached) < required:
            raise NotReplicatedError(
                f"task {task_id} reached {int(reached)} of {required} replica(s) "
                f"within SUBMIT_WAIT_TIMEOUT_MS={self.config.submit_wait_timeout_ms}: not acknowledged"
            )
        return reply

    async def get(self, job_id: str) -> Job | None:
        """The job's record; a stand-in saying why when it does not load as it is (:meth:`Job.stored`), so that a
        caller asking after such a task is answered its status, not an error."""
        raw = await self.redis.get(self.shards.of(job_id).job(job_id))
        return None if raw is None else Job.stored(raw)

    async def position(self, job_id: str) -> int | None:
        """About how many claims on its shard come before this job (0 = next), or None when it is not waiting in
        line: the deficit round robin's order with nobody else arriving, its tenant's turns and its lane's share
        (``fair.lua``'s ``fair_estimate``, docs/fairness.md) — an estimate, since a tenant arriving later may be
        served before it."""
        keys = self.shards.of(job_id)
        args: list[Any] = [keys.fair_prefix, self.config.interactive_burst]
        reply = await self._position(keys=[keys.job(job_id), *lanes(keys), keys.weights], args=args)
        return None if reply is None else int(reply)

    async def waiting(
        self, tenant: str = ANONYMOUS_TENANT, priority: Priority = "interactive", keys: Keys | None = None
    ) -> list[str]:
        """The ids ``tenant`` has waiting in one lane of a shard (the home shard by default), the front first."""
        raw = await self.redis.lrange((keys or self.keys).tenant_queue(priority, tenant), 0, -1)
        return [text(item) for item in reversed(raw)]

    async def ping(self) -> None:
        """Raise when Redis is unreachable (readiness)."""
        await self.redis.ping()

    async def depth(self) -> int:
        """Jobs waiting, on every shard."""
        return sum(await asyncio.gather(*(self.redis.llen(keys.queue) for keys in self.shards.all)))

    async def result(self, job_id: str) -> bytes | None:
        value = await self.redis.get(self.shards.of(job_id).result(job_id))
        return value if isinstance(value, bytes) else None

    # ---- a caller's cancel (its notice is what the workers follow) -------------------------------

    async def cancel(self, job: Job, reader: str | None, holder: str | None = None, *, sole: bool = False) -> Cancelled:
        """Cancel ``job`` for the caller — ``reader`` its key id, ``holder`` its owner name (see
        :class:`Cancelled`); calling it again changes nothing. ``sole``: only if no submit joined it since it was
        queued (``Job.joins``), else :attr:`Cancelled.KEPT` and nothing changes — checked in the script, so a join
        that lands just before is never cancelled with it."""
        keys_of = self.shards.of(job.id)
        keys = [
            keys_of.job(job.id),
            keys_of.queue,
            keys_of.processing,
            keys_of.delayed,
            inflight_key(keys_of, job.params.cache_key),
            keys_of.stream(job.id),
            *ending_keys(keys_of, job),
            home_queue(keys_of, job),
            keys_of.ring(job.lane),
            keys_of.credit(job.lane),
            keys_of.moves,
            keys_of.cancels,
        ]
        args: list[Any] = [job.id, reader or "", self.clock.arg(), self.config.result_ttl_s, keys_of.prefix, holder or ""]
        return Cancelled.parse(await self._cancel(keys=keys, args=[*args, "1" if sole else "0", _CANCELS_KEPT]))
