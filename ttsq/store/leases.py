"""The workers' side of the job protocol (:mod:`ttsq.store.queue` tells the whole of it): claim jobs under a fenced
lease, renew the leases while the jobs run, end each job under its claim (complete, or fail: retry or dead-letter),
follow the cancels of running jobs, and sweep back what dead workers held. A stale token (the lease lapsed and the job
was claimed again) is refused by every script here, so a worker that wakes after a long stall changes nothing.

:class:`Leases` is the queue's (:attr:`JobQueue.leases <ttsq.store.queue.JobQueue.leases>`), on its connection, shards
and clock; what it remembers between calls (a claim whose answer was lost, the newest token answered per worker, whose
shard is next) is its own, one per queue object (a worker process has one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ttsq.domain.captions import Cue
from ttsq.domain.jobs import LANES, Job
from ttsq.store.clock import RedisClock
from ttsq.store.connection import STORE_ERRORS, RedisClient
from ttsq.store.keys import Keys, Shards
from ttsq.store.replies import (
    ClaimReply,
    Completed,
    Failed,
    Peeked,
    Renewed,
    Started,
    SweepReport,
    SweepScan,
    text,
)
from ttsq.store.scripts import ending_keys, flag, inflight_key, lanes, lua_script

if TYPE_CHECKING:  # types only: the queue builds its leases
    from ttsq.store.queue import QueueConfig

log = logging.getLogger("ttsq.store.queue")  # the protocol's story, one logger: its callers' side logs there too


_PROMOTE_LIMIT = 1000
"""Most retries released per sweep (the rest wait one interval)."""
_SWEEP_LIMIT = 1000
"""Most lapsed leases (and unleased ids) one sweep looks at (the rest wait one interval)."""
_CLAIM_RACES = 5
"""Peeks a claim makes while other workers keep taking the ids it peeked, before it waits for work instead."""


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
        """The claim's fencing token: what :meth:`Leases.renew_leases`, :meth:`Leases.complete` and
        :meth:`Leases.fail` (and the job's audio stream) need to act as the job's holder."""
        if self.job.claim is None:
            raise ValueError(f"the claim of job {self.job.id} carries no fencing token")
        return self.job.claim


def _captions_arg(captions: list[Cue] | None) -> str:
    """``complete.lua``'s captions argument: '' for none (Lua's JSON would turn an empty list into an object)."""
    return json.dumps([cue.model_dump() for cue in captions]) if captions else ""


def _claimed(job: Job) -> int:
    """A claimed job's fencing token (``claim.lua`` sets it on every claim)."""
    if job.claim is None:
        raise ValueError(f"job {job.id} was not claimed: it carries no claim token")
    return job.claim


def _claim_record_ms(config: QueueConfig) -> int:
    """How long a worker's last claim is remembered for a repeat: a lease (whatever it claimed is back in the
    queue by then anyway), and at least a minute."""
    return int(max(config.lease_s, 60.0) * 1000)


class Leases:
    """The workers' side of the queue over ``config.shards`` shards: claims from every shard in turn, renewals and
    endings on the job's own shard, and the sweep and the cancels on each."""

    def __init__(self, redis: RedisClient, config: QueueConfig, shards: Shards, clock: RedisClock) -> None:
        self.redis = redis
        self.config = config
        self.shards = shards
        self.clock = clock
        self._peek = lua_script(redis, "peek", timed=False, fair=True)
        self._claim_script = lua_script(redis, "claim", ends_jobs=True, fair=True)
        self._renew = lua_script(redis, "renew")
        self._complete = lua_script(redis, "complete", ends_jobs=True)
        self._fail = lua_script(redis, "fail", ends_jobs=True)
        self._sweep_scan = lua_script(redis, "sweep_scan", fair=True)
        self._sweep = lua_script(redis, "sweep", fair=True)
        self._clear_inflight = lua_script(redis, "clear_inflight", timed=False)
        self._unanswered: dict[str, str] = {}
        """Per worker, the request id of a claim that raised before its answer came: the worker's next claim asks again."""
        self._turn = 0
        """Which shard a claim looks at first (every shard in turn, so each gets its share of the workers)."""
        self._seen: dict[tuple[str, str], int] = {}
        """Per worker and shard, the newest claim token answered to it: renewals prune its set of claims up to it."""

    def _rotation(self) -> list[Keys]:
        """Every shard, starting with the next in turn."""
        self._turn = (self._turn + 1) % self.shards.count
        return self.shards.all[self._turn :] + self.shards.all[: self._turn]

    async def claim(self, worker_id: str, block_s: float | None = None, *, new: int | None = None) -> Claim | None:
        """Wait up to ``block_s`` for a job, move it to processing and lease it to ``worker_id``.

        Every shard is looked at in turn; a job whose last worker was lost (``isolate``) may be claimed here, alone.
        The wait is a ``BLMOVE`` of one shard's queue onto itself (the last id back to where it was; with several
        shards, each waits in turn for a share of ``block_s``): it changes nothing, so a retried wait is
        harmless, and the claim itself is :meth:`claim_more`'s idempotent script. ``new``: as :meth:`claim_more`'s.
        """
        rotation = self._rotation()
        for keys in rotation:
            claims = await self._claim(keys, worker_id, 1, alone_first=True, new=new)
            if claims:
                return claims[0]
        timeout = (self.config.block_s if block_s is None else block_s) / self.shards.count
        waited = rotation[0]
        # Redis takes fractional block timeouts; redis-py's annotation says int.
        if await self.redis.blmove(waited.queue, waited.queue, timeout, "RIGHT", "RIGHT") is None:  # type: ignore[arg-type]
            return None
        claims = await self._claim(waited, worker_id, 1, alone_first=True, new=new)
        return claims[0] if claims else None

    async def claim_more(self, worker_id: str, count: int, *, new: int | None = None) -> list[Claim]:
        """Claim up to ``count`` more jobs without blocking (to fill a batch), from every shard in turn.

        Stops, on each shard, before a job marked ``isolate`` (its last worker was lost): that one is left for a
        blocking :meth:`claim`, and the worker runs it alone.

        ``new`` (None: no limit) bounds the new work among them — jobs of a lane other than ``continuation``, each a
        stream the worker would start —, not the continuations of streams already playing: past it, only
        continuations are claimed (``fair.lua``'s ``fair_lane``; docs/fairness.md).

        A shard that fails after others answered (its slot moving in a resharded Redis Cluster, its master failing
        over) ends the round with the claims already taken: they are leased to this worker, and raising would lose
        them from its hands until their leases lapse. The failed shard's claim is asked again by the next one
        (:meth:`_claim`). With nothing claimed yet, the error is raised: the caller's outage path.
        """
        claims: list[Claim] = []
        for keys in self._rotation():
            if len(claims) >= count:
                break
            left = None if new is None else max(0, new - sum(claim.job.lane != "continuation" for claim in claims))
            try:
                claims += await self._claim(keys, worker_id, count - len(claims), alone_first=False, new=left)
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

    async def _claim(self, keys_of: Keys, worker_id: str, count: int, *, alone_first: bool, new: int | None = None) -> list[Claim]:
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
            fair_keys = [*lanes(keys_of), *(keys_of.credit(lane) for lane in LANES), keys_of.weights, keys_of.streak]
            limit = "" if new is None else new
            peek_args: list[Any] = [count, keys_of.job_prefix, keys_of.fair_prefix, self.config.interactive_burst, limit]
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
            args += [self.config.dead_letter_max, keys_of.prefix, _claim_record_ms(self.config), flag(alone_first)]
            args += [self.config.interactive_burst, limit, *peeked.ids]
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
        for stray in reply.strays:
            log.error("a job claimed on shard %r has a record that is no job at all (%s): its lease lapses", keys.label, stray)
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
            inflight_key(keys_of, cache_key),
            keys_of.stream(job_id),
            *ending_keys(keys_of, job),
        ]
        args: list[Any] = [job_id, audio, self.config.result_ttl_s, self.clock.arg(), duration_s, content_type, busy_s]
        args += [flag(cache_key is not None), keys_of.prefix, token, _captions_arg(captions), speaker or ""]
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
            inflight_key(keys_of, cache_key),
            *ending_keys(keys_of, job),
            keys_of.stream(job_id),
        ]
        args: list[Any] = [
            job_id,
            reason[:2000],
            flag(retryable),
            self.clock.arg(),
            self.config.retry_base_s,
            self.config.result_ttl_s,
            self.config.dead_letter_max,
            flag(cache_key is not None),
            keys_of.prefix,
            token,
        ]
        return Failed.parse(await self._fail(keys=keys, args=args))

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
        keys = [keys_of.sweep_lock, keys_of.leases, keys_of.processing, keys_of.queue, keys_of.delayed, *lanes(keys_of)]
        keys += [keys_of.workers, keys_of.claims, keys_of.fences]
        for job_id, (lane, tenant) in zip(ids, scan.places, strict=True):
            keys += [keys_of.job(job_id), keys_of.tenant_queue(lane, tenant)]
        keys += [keys_of.worker_jobs(worker) for worker in scan.owners]
        args: list[Any] = [self.clock.arg(), max(1, int(interval_s * 1000)), self.config.lease_s, keys_of.fair_prefix, holder]
        args += [len(scan.lapsed), len(scan.unleased), len(scan.due), len(scan.abandoned), self.config.heartbeat_ttl_s]
        args += [*ids, *scan.owners]
        return SweepReport.parse(await self._sweep(keys=keys, args=args))
