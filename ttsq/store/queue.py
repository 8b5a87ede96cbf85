"""The reliable job queue: the only code that writes a job to Redis.

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
  follows with a blocking read (:meth:`JobQueue.cancel_notices`): its worker stops the job's rows at the next
  decode step; the mark stays the record, and lease renewals still report it.
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
import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from redis.commands.core import AsyncScript

from ttsq.domain.captions import Cue
from ttsq.domain.jobs import ANONYMOUS_TENANT, PRIORITIES, Job, Priority, Status, TTSParams
from ttsq.store.clock import Clock, RedisClock, clock_lua
from ttsq.store.connection import (
    STORE_ERRORS,
    NotReplicatedError,
    RedisClient,
    ReplicaCount,
    Replication,
    SubmitWaitReplicas,
)
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.keys import Keys, Shards
from ttsq.store.queue_stats import DEFAULT_JOB_S, QueueStats, estimate_s
from ttsq.store.rate_limit import Charge, RateDecision, RateLimitExceeded, charge_script, token_bucket_lua
from ttsq.store.replies import (
    Cancelled,
    ClaimReply,
    Completed,
    Enqueued,
    EnqueueReply,
    Failed,
    Peeked,
    Renewed,
    Started,
    SweepReport,
    SweepScan,
    TokenTaken,
    text,
)

log = logging.getLogger(__name__)


_PROMOTE_LIMIT = 1000
"""Most retries released per sweep (the rest wait one interval)."""
_SWEEP_LIMIT = 1000
"""Most lapsed leases (and unleased ids) one sweep looks at (the rest wait one interval)."""
_CLAIM_RACES = 5
"""Peeks a claim makes while other workers keep taking the ids it peeked, before it waits for work instead."""
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


@dataclass(frozen=True)
class CancelNotice:
    """One entry of a shard's cancels stream: a caller cancelled ``job_id`` while it ran under ``worker``'s claim."""

    job_id: str
    worker: str
    claim: int
    at: float
    """When it was cancelled: Unix seconds by the shard's Redis clock (the entry's id)."""


@dataclass(frozen=True)
class Claim:
    """A claimed job: runnable, or dead-lettered by the claim itself (it had no attempts left)."""

    job: Job
    started: Started

    @property
    def runnable(self) -> bool:
        return self.started is Started.RUN

    @property
    def token(self) -> int:
        """The claim's fencing token: what :meth:`JobQueue.renew_leases`, :meth:`JobQueue.complete` and
        :meth:`JobQueue.fail` (and the job's audio stream) need to act as the job's holder."""
        if self.job.claim is None:
            raise ValueError(f"the claim of job {self.job.id} carries no fencing token")
        return self.job.claim


# ---------------------------------------------------------------------------------------------


def _lua(name: str) -> str:
    return files("ttsq.store").joinpath("lua", f"{name}.lua").read_text()


def lua_script(redis: RedisClient, name: str, *, ends_jobs: bool = False, timed: bool = True, fair: bool = False) -> AsyncScript:
    """A script from ``lua/``, with Redis's clock (``clock.lua``) in front unless it keeps no time; one that can
    end a job also gets ``finish.lua`` (owner count, webhook); one that puts jobs in line, takes them out or says
    where one stands gets ``fair.lua`` (the tenants' round robin)."""
    prelude = (clock_lua() + "\n" if timed else "") + (_lua("finish") + "\n" if ends_jobs else "")
    prelude += _lua("fair") + "\n" if fair else ""
    return redis.register_script(prelude + _lua(name))


def home_queue(keys: Keys, job: Job) -> str:
    """The tenant queue a job waits in (``fair.lua``'s ``tenant_of``: a record without a tenant waits under '-')."""
    return keys.tenant_queue(job.priority, job.tenant or "-")


def _captions_arg(captions: list[Cue] | None) -> str:
    """``complete.lua``'s captions argument: '' for none (Lua's JSON would turn an empty list into an object)."""
    return json.dumps([cue.model_dump() for cue in captions]) if captions else ""


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _claimed(job: Job) -> int:
    """A claimed job's fencing token (``claim.lua`` sets it on every claim)."""
    if job.claim is None:
        raise ValueError(f"job {job.id} was not claimed: it carries no claim token")
    return job.claim


def _claim_record_ms(config: QueueConfig) -> int:
    """How long a worker's last claim is remembered for a repeat: a lease (whatever it claimed is back in the
    queue by then anyway), and at least a minute."""
    return int(max(config.lease_s, 60.0) * 1000)


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
        self._enqueue = redis.register_script("\n".join([clock_lua(), token_bucket_lua(), _lua("fair"), _lua("enqueue")]))
        self._record_done = lua_script(redis, "record_done", timed=False)
        self.replication = Replication(
            redis, config.submit_wait_replicas, config.submit_wait_timeout_ms, config.submit_wait_replicas_check_s
        )
        """How many replicas an acknowledging write waits for, and whether the primary has them (readiness)."""
        self._charge = charge_script(redis)
        self._peek = lua_script(redis, "peek", timed=False, fair=True)
        self._claim_script = lua_script(redis, "claim", ends_jobs=True, fair=True)
        self._renew = lua_script(redis, "renew")
        self._complete = lua_script(redis, "complete", ends_jobs=True)
        self._fail = lua_script(redis, "fail", ends_jobs=True)
        self._cancel = lua_script(redis, "cancel", ends_jobs=True, fair=True)
        self._sweep_scan = lua_script(redis, "sweep_scan", fair=True)
        self._sweep = lua_script(redis, "sweep", fair=True)
        self._position = lua_script(redis, "position", timed=False, fair=True)
        self._clear_inflight = lua_script(redis, "clear_inflight", timed=False)
        self.stats = QueueStats(redis, self.shards, Heartbeats(redis, self.shards, config.heartbeat_ttl_s, self.clock))
        """What is counted of the queue (the wait estimate an enqueue answers with, the metrics' snapshot)."""
        self._unanswered: dict[str, str] = {}
        """Per worker, the request id of a claim that raised before its answer came: the worker's next claim asks again."""
        self._turn = 0
        """Which shard a claim looks at first (every shard in turn, so each gets its share of the workers)."""
        self._seen: dict[tuple[str, str], int] = {}
        """Per worker and shard, the newest claim token answered to it: renewals prune its set of claims up to it."""

    def _share(self, cap: int) -> int:
        """A shard's share of a cap over the whole queue."""
        return max(1, math.ceil(cap / self.shards.count)) if cap else cap

    @staticmethod
    def _ending_keys(keys: Keys, job: Job) -> list[str]:
        """What ending ``job`` touches besides its own keys (``finish.lua``): its owner's count, the webhook queue.
        Declared, never built inside a script: on a Redis Cluster whose slot is moving, Redis can then refuse the
        script rather than let it write a key the move has already taken away."""
        return [keys.owner_jobs(job.owner or "-"), keys.deliveries]

    @staticmethod
    def _lanes(keys: Keys) -> list[str]:
        """Both lanes' rings, interactive first (what every fair script declares to choose a lane)."""
        return [keys.ring(lane) for lane in PRIORITIES]

    @staticmethod
    def _inflight_key(keys: Keys, cache_key: str | None) -> str:
        """The job's single-flight marker; jobs without a cache key get a placeholder the scripts never touch."""
        return keys.inflight(cache_key or "-")

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

        Fair queuing (docs/fairness.md): the job waits in ``tenant``'s queue of its ``priority`` lane, and ``weight``
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
        keys = [
            keys_of.job(job_id),
            keys_of.queue,
            keys_of.stats,
            keys_of.workers,
            self._inflight_key(keys_of, params.cache_key),
            keys_of.owner_jobs(owner or "-"),
            charge.key if charge is not None else keys_of.rate_limit("-"),
            keys_of.tenant_queue(priority, tenant),
            keys_of.ring(priority),
            keys_of.weights,
        ]
        stale = ""
        for _ in range(3):
            args: list[Any] = [job.model_dump_json(), job_id, self._share(self.config.max_queue_depth), _flag(joining), stale]
            args += [self.config.heartbeat_ttl_s, keys_of.job_prefix, reader or "", owner or "", self._share(max_per_owner)]
            # Pay once: a retry after a stale single-flight marker has paid already.
            paying = charge is not None and rate is None
            args += [charge.clock, charge.rate_per_s, charge.burst] if paying and charge is not None else [self.clock.arg(), "", 0]
            args += [tenant, priority, weight, keys_of.fair_prefix, self.config.interactive_burst]
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
            [audio, job.model_dump_json(), self.config.result_ttl_s, _flag(deliver), job_id],
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
        raw = await self.redis.get(self.shards.of(job_id).job(job_id))
        return None if raw is None else Job.model_validate_json(raw)

    async def position(self, job_id: str) -> int | None:
        """About how many claims on its shard come before this job (0 = next), or None when it is not waiting in
        line: the deficit round robin's order with nobody else arriving, its tenant's turns and its lane's share
        (``fair.lua``'s ``fair_estimate``, docs/fairness.md) — an estimate, since a tenant arriving later may be
        served before it."""
        keys = self.shards.of(job_id)
        args: list[Any] = [keys.fair_prefix, self.config.interactive_burst]
        reply = await self._position(keys=[keys.job(job_id), *self._lanes(keys), keys.weights], args=args)
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

    # ---- consumer side -------------------------------------------------------------------

    def _rotation(self) -> list[Keys]:
        """Every shard, starting with the next in turn."""
        self._turn = (self._turn + 1) % self.shards.count
        return self.shards.all[self._turn :] + self.shards.all[: self._turn]

    async def claim(self, worker_id: str, block_s: float | None = None) -> Claim | None:
        """Wait up to ``block_s`` for a job, move it to processing and lease it to ``worker_id``.

        Every shard is looked at in turn; a job whose last worker was lost (``isolate``) may be claimed here, alone.
        The wait is a ``BLMOVE`` of one shard's queue onto itself (the last id back to where it was; with several
        shards, each waits in turn for a share of ``block_s``): it changes nothing, so a retried wait is
        harmless, and the claim itself is :meth:`claim_more`'s idempotent script.
        """
        rotation = self._rotation()
        for keys in rotation:
            claims = await self._claim(keys, worker_id, 1, alone_first=True)
            if claims:
                return claims[0]
        timeout = (self.config.block_s if block_s is None else block_s) / self.shards.count
        waited = rotation[0]
        # Redis takes fractional block timeouts; redis-py's annotation says int.
        if await self.redis.blmove(waited.queue, waited.queue, timeout, "RIGHT", "RIGHT") is None:  # type: ignore[arg-type]
            return None
        claims = await self._claim(waited, worker_id, 1, alone_first=True)
        return claims[0] if claims else None

    async def claim_more(self, worker_id: str, count: int) -> list[Claim]:
        """Claim up to ``count`` more jobs without blocking (to fill a batch), from every shard in turn.

        Stops, on each shard, before a job marked ``isolate`` (its last worker was lost): that one is left for a
        blocking :meth:`claim`, and the worker runs it alone.

        A shard that fails after others answered (its slot moving in a resharded Redis Cluster, its master failing
        over) ends the round with the claims already taken: they are leased to this worker, and raising would lose
        them from its hands until their leases lapse. The failed shard's claim is asked again by the next one
        (:meth:`_claim`). With nothing claimed yet, the error is raised: the caller's outage path.
        """
        claims: list[Claim] = []
        for keys in self._rotation():
            if len(claims) >= count:
                break
            try:
                claims += await self._claim(keys, worker_id, count - len(claims), alone_first=False)
            except (*STORE_ERRORS, OSError) as exc:
                if not claims:
                    raise
                log.warning(
                    "claiming from queue shard %r failed (%s: %s); keeping the %d job(s) claimed from the others",
                    keys.label,
                    type(exc).__name__,
                    exc,
                    len(claims),
                )
                break
        return claims

    async def _claim(self, keys_of: Keys, worker_id: str, count: int, *, alone_first: bool) -> list[Claim]:
        """``peek.lua`` names the ids at the front of a shard's queue, then ``claim.lua`` claims them with every key
        it touches declared (so a Redis Cluster moving the slot refuses it rather than let it misread a job).
        Another worker may take those ids first: then the claim takes none and this peeks again, a few times.

        Safe to repeat: a claim whose answer was lost (a timeout, a dropped connection, after redis-py's own
        retries) is asked again under the same request id by this worker's next claim on that shard, and the
        script answers the jobs it claimed then instead of claiming more. So no job is ever leased to a worker
        that does not know it holds it."""
        lost = f"{worker_id}|{keys_of.prefix}"
        request = self._unanswered.pop(lost, None)
        repeating = request is not None
        for _ in range(_CLAIM_RACES):
            fair_keys = [*self._lanes(keys_of), *(keys_of.credit(lane) for lane in PRIORITIES), keys_of.weights, keys_of.streak]
            peek_args: list[Any] = [count, keys_of.job_prefix, keys_of.fair_prefix, self.config.interactive_burst]
            peeked = Peeked.parse(await self._peek(keys=fair_keys, args=peek_args))
            if not peeked.ids and not repeating:
                return []
            request = request or uuid.uuid4().hex
            keys = [keys_of.queue, keys_of.processing, keys_of.leases, keys_of.dead, keys_of.claims]
            keys += [keys_of.claim_record(worker_id), keys_of.deliveries, *fair_keys, keys_of.moves, keys_of.worker_jobs(worker_id)]
            for job_id, owner, lane, tenant in zip(peeked.ids, peeked.owners, peeked.lanes, peeked.tenants, strict=True):
                keys += [keys_of.job(job_id), keys_of.owner_jobs(owner or "-"), keys_of.tenant_queue(lane, tenant)]
                keys += [keys_of.stream(job_id)]
            args: list[Any] = [worker_id, request, self.clock.arg(), self.config.lease_s, self.config.result_ttl_s]
            args += [self.config.dead_letter_max, keys_of.prefix, _claim_record_ms(self.config), _flag(alone_first)]
            args += [self.config.interactive_burst, *peeked.ids]
            try:
                reply = ClaimReply.parse(await self._claim_script(keys=keys, args=args))
            except BaseException:
                self._unanswered[lost] = request
                raise
            if reply.repeated:
                log.warning(
                    "a claim's answer was lost on its way (a timeout or a dropped connection); asked again, it named "
                    "%d job(s), now in hand: none is stranded",
                    len(reply.started),
                )
            elif repeating and reply.started:
                log.info("a claim whose answer was lost had not reached Redis; claimed %d job(s) afresh", len(reply.started))
            if reply.repeated or reply.started or not peeked.ids:
                return await self._claimed(keys_of, worker_id, reply)
            request, repeating = None, False  # another worker took the peeked ids first: peek again
        return []

    async def _claimed(self, keys: Keys, worker_id: str, reply: ClaimReply) -> list[Claim]:
        claims = [Claim(job=started.job, started=started.started) for started in reply.started]
        seen = (worker_id, keys.prefix)
        for claim in claims:
            if claim.started is Started.RUN:
                self._seen[seen] = max(self._seen.get(seen, 0), claim.token)
            if claim.started is Started.DEAD:
                log.warning("job %s dead-lettered at claim: %s", claim.job.id, claim.job.error)
                if claim.job.params.cache_key is not None:
                    await self._clear_inflight(keys=[keys.inflight(claim.job.params.cache_key)], args=[claim.job.id])
        return claims

    async def renew_leases(self, held: Mapping[str, int], worker_id: str | None = None) -> Renewed:
        """Move the lease deadline of every job in ``held`` (job id → its claim's fencing token) forward;
        which are no longer held (the token is stale), and which were cancelled while running (their work
        may stop: :meth:`fail` ends them as cancelled). One script per shard. Named, ``worker_id``'s own set of
        claims on each shard is pruned of the jobs it no longer holds (claims answered to it since stay)."""
        by_shard: dict[str, dict[str, int]] = {}
        for job_id, token in held.items():
            by_shard.setdefault(self.shards.of(job_id).label, {})[job_id] = token
        replies = await asyncio.gather(
            *(self._renew_on(self.shards.of(next(iter(jobs))), jobs, worker_id) for jobs in by_shard.values())
        )
        return Renewed(
            frozenset(job_id for reply in replies for job_id in reply.lost),
            frozenset(job_id for reply in replies for job_id in reply.cancelling),
        )

    async def _renew_on(self, keys: Keys, held: Mapping[str, int], worker_id: str | None) -> Renewed:
        pairs = [value for job_id, token in held.items() for value in (job_id, token)]
        seen = self._seen.get((worker_id, keys.prefix), 0) if worker_id is not None else 0
        reply = await self._renew(
            keys=[keys.leases, keys.worker_jobs(worker_id or "-"), *(keys.job(job_id) for job_id in held)],
            args=[self.clock.arg(), self.config.lease_s, worker_id or "", seen, *pairs],
        )
        return Renewed.parse(reply)

    async def complete(
        self,
        job: Job,
        audio: bytes,
        content_type: str,
        duration_s: float,
        busy_s: float,
        cache_key: str | None,
        captions: list[Cue] | None = None,
        speaker: str | None = None,
    ) -> Completed | Failed:
        """Store the result of a claimed ``job`` and mark it done (both expire after ``result_ttl_s``), if its
        claim (:attr:`Job.claim`, the fencing token) is still the job's current one (:attr:`Completed.STALE`,
        and nothing changes, otherwise).

        ``cache_key`` releases the job's single-flight marker, so later identical requests are
        served from the cache instead of joining a finished job. A result over
        ``max_result_bytes`` fails the job instead (the :class:`Failed` outcome is returned). ``speaker``, the
        speaker embedding it was synthesised with, is kept on the job when given (:attr:`Job.speaker`).
        """
        if len(audio) > self.config.max_result_bytes:
            reason = f"result is {len(audio)} bytes; the limit is {self.config.max_result_bytes}"
            return await self.fail(job, reason, retryable=False, cache_key=cache_key)
        job_id, token, keys_of = job.id, _claimed(job), self.shards.of(job.id)
        keys = [
            keys_of.job(job_id),
            keys_of.result(job_id),
            keys_of.leases,
            keys_of.processing,
            keys_of.stats,
            self._inflight_key(keys_of, cache_key),
            keys_of.stream(job_id),
            *self._ending_keys(keys_of, job),
        ]
        args: list[Any] = [job_id, audio, self.config.result_ttl_s, self.clock.arg(), duration_s, content_type, busy_s]
        args += [_flag(cache_key is not None), keys_of.prefix, token, _captions_arg(captions), speaker or ""]
        return Completed.parse(await self._complete(keys=keys, args=args))

    async def fail(self, job: Job, reason: str, *, retryable: bool, cache_key: str | None) -> Failed:
        """Record a failed attempt of a claimed ``job``: retry later with backoff, or fail for good and dead-letter —
        if its claim is still the job's current one (:attr:`Failed.STALE`, and nothing changes, otherwise)."""
        job_id, token, keys_of = job.id, _claimed(job), self.shards.of(job.id)
        keys = [
            keys_of.job(job_id),
            keys_of.leases,
            keys_of.processing,
            keys_of.delayed,
            keys_of.dead,
            self._inflight_key(keys_of, cache_key),
            *self._ending_keys(keys_of, job),
            keys_of.stream(job_id),
        ]
        args: list[Any] = [
            job_id,
            reason[:2000],
            _flag(retryable),
            self.clock.arg(),
            self.config.retry_base_s,
            self.config.result_ttl_s,
            self.config.dead_letter_max,
            _flag(cache_key is not None),
            keys_of.prefix,
            token,
        ]
        return Failed.parse(await self._fail(keys=keys, args=args))

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
            self._inflight_key(keys_of, job.params.cache_key),
            keys_of.stream(job.id),
            *self._ending_keys(keys_of, job),
            home_queue(keys_of, job),
            keys_of.ring(job.priority),
            keys_of.credit(job.priority),
            keys_of.moves,
            keys_of.cancels,
        ]
        args: list[Any] = [job.id, reader or "", self.clock.arg(), self.config.result_ttl_s, keys_of.prefix, holder or ""]
        return Cancelled.parse(await self._cancel(keys=keys, args=[*args, "1" if sole else "0", _CANCELS_KEPT]))

    async def last_cancel(self, keys: Keys) -> str:
        """The id of the newest entry of a shard's cancels stream ('0-0' when it has none): where a worker that starts
        following it begins (a cancel older than its start names no job it holds)."""
        newest = await self.redis.xrevrange(keys.cancels, count=1)
        return text(newest[0][0]) if newest else "0-0"

    async def cancel_notices(self, keys: Keys, after: str, block_s: float) -> tuple[str, list[CancelNotice]]:
        """The cancels of running jobs announced on a shard after entry ``after``, waiting up to ``block_s`` for one
        (``block_s`` < the socket timeout); and the id to read after next time."""
        reply: Any = await self.redis.xread({keys.cancels: after}, count=100, block=max(1, int(block_s * 1000)))
        notices: list[CancelNotice] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                after = text(entry_id)
                values = {text(name): text(value) for name, value in fields.items()}
                claim = values.get("claim", "")
                notices.append(
                    CancelNotice(
                        job_id=values.get("job", ""),
                        worker=values.get("worker", ""),
                        claim=int(claim) if claim.isdigit() else 0,
                        at=int(after.split("-", 1)[0]) / 1000,
                    )
                )
        return after, notices

    async def sweep(self, interval_s: float, holder: str) -> SweepReport:
        """Requeue the jobs of workers whose heartbeat has lapsed, lapsed leases and never-started claims, release due
        retries, on every shard — each unless another worker already swept it within ``interval_s`` (its lock lasts one
        interval). ``holder`` is the sweeping worker: it judges the others' heartbeats only once its own have run
        unbroken for a TTL. Swept when any shard was; the counts are summed."""
        reports = await asyncio.gather(*(self._sweep_shard(keys, interval_s, holder) for keys in self.shards.all))
        report = SweepReport(
            swept=any(report.swept for report in reports),
            requeued=sum(report.requeued for report in reports),
            orphans=sum(report.orphans for report in reports),
            promoted=sum(report.promoted for report in reports),
            abandoned=sum(report.abandoned for report in reports),
        )
        if report.abandoned:
            log.warning("sweep requeued %d job(s) whose worker's heartbeat stopped (to run alone)", report.abandoned)
        if report.requeued or report.orphans:
            log.warning(
                "sweep requeued %d job(s) whose worker stopped renewing its lease and %d claimed but never started",
                report.requeued,
                report.orphans,
            )
        if report.promoted:
            log.info("released %d job(s) whose retry backoff is over", report.promoted)
        return report

    async def _sweep_shard(self, keys_of: Keys, interval_s: float, holder: str) -> SweepReport:
        """Two steps: ``sweep_scan.lua`` names the ids to look at, then ``sweep.lua`` acts on them with their job
        keys declared (a Redis Cluster moving the slot then refuses it rather than let it misread a job)."""
        scanned = [keys_of.sweep_lock, keys_of.leases, keys_of.processing, keys_of.delayed, keys_of.workers, keys_of.beats_since]
        scan_args: list[Any] = [self.clock.arg(), _SWEEP_LIMIT, _PROMOTE_LIMIT, keys_of.job_prefix, holder]
        scan_args += [self.config.heartbeat_ttl_s, keys_of.worker_jobs_prefix]
        scan = SweepScan.parse(await self._sweep_scan(keys=scanned, args=scan_args))
        if scan is None:
            return SweepReport(swept=False)
        ids = [*scan.lapsed, *scan.unleased, *scan.due, *scan.abandoned]
        keys = [keys_of.sweep_lock, keys_of.leases, keys_of.processing, keys_of.queue, keys_of.delayed, *self._lanes(keys_of)]
        keys += [keys_of.workers, keys_of.claims, keys_of.fences]
        for job_id, (lane, tenant) in zip(ids, scan.places, strict=True):
            keys += [keys_of.job(job_id), keys_of.tenant_queue(lane, tenant)]
        keys += [keys_of.worker_jobs(worker) for worker in scan.owners]
        args: list[Any] = [self.clock.arg(), max(1, int(interval_s * 1000)), self.config.lease_s, keys_of.fair_prefix, holder]
        args += [len(scan.lapsed), len(scan.unleased), len(scan.due), len(scan.abandoned), self.config.heartbeat_ttl_s]
        args += [*ids, *scan.owners]
        return SweepReport.parse(await self._sweep(keys=keys, args=args))
