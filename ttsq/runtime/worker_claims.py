"""A worker's claims: one blocking claim, then as many more as the worker has room for — with the engine idle, for
up to ``BATCH_WAIT_MS``, so that they start in one step — and what each claim brings counted (the queue wait of a
first attempt, a job the claim itself dead-lettered).

*How many* the worker may take is the loop's (:meth:`Worker._free_room <ttsq.runtime.worker.Worker._free_room>`: the
engine's slots, a job that must run alone, the real-time streams); *taking* them is here, under the one Redis-outage
policy (:mod:`ttsq.runtime.upkeep`): a failed claim is reported once, in the heartbeat too, and the next waits until
Redis is seen back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from ttsq.domain.jobs import Job
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.metrics import WorkerMetrics
from ttsq.runtime.upkeep import REDIS_ERRORS, RedisOutage, describe
from ttsq.store.leases import Claim
from ttsq.store.queue import JobQueue


class WorkerClaims:
    """A worker's claims, as ``identity`` in ``queue``: it stops taking more once ``stop`` is set; ``in_flight`` is
    the worker's own map of the jobs in the engine (read, never changed here: with none, a claim waits for more)."""

    def __init__(
        self,
        queue: JobQueue,
        outage: RedisOutage,
        record: HeartbeatRecord,
        metrics: WorkerMetrics,
        *,
        identity: str,
        batch_wait_ms: float,
        stop: asyncio.Event,
        in_flight: Mapping[str, object],
    ) -> None:
        self.queue = queue
        self.outage = outage
        self.record = record
        self.metrics = metrics
        self.identity = identity
        self.batch_wait_ms = batch_wait_ms
        self._stop = stop
        self._in_flight = in_flight

    async def take(self, room: int, new: int | None = None) -> list[Job]:
        """One blocking claim, then up to ``room`` more at once; when the engine is idle, more may
        come for ``batch_wait_ms`` (they start together). A job whose last worker was lost is claimed
        alone and runs alone. ``new`` (None: ``room``) bounds the jobs that start new streams among them, not the
        continuations of streams already playing (:meth:`Leases.claim_more <ttsq.store.leases.Leases.claim_more>`);
        with no room for new ones, only the continuations waiting now are claimed, without blocking.

        Every claimed job is leased to this worker at once, so a crash at any point leaves each
        of them to the sweep individually. A Redis failure returns what was claimed so far.
        """
        jobs: list[Job] = []
        new = room if new is None else min(new, room)
        claimed = 0
        try:
            if new > 0:
                claim = await self.queue.leases.claim(self.identity, new=new)
                if claim is None:
                    self.outage.back()
                    self.record.claim_error = None
                    return []
                jobs += self._claimed([claim])
                claimed += claim.job.lane != "continuation"
                if claim.job.isolate:
                    return jobs
            deadline = time.monotonic() + (self.batch_wait_ms / 1000 if not self._in_flight and new > 0 else 0.0)
            while len(jobs) < room and not self._stop.is_set():
                more = await self.queue.leases.claim_more(self.identity, room - len(jobs), new=max(0, new - claimed))
                claimed += sum(claim.job.lane != "continuation" for claim in more)
                jobs += self._claimed(more)
                remaining = deadline - time.monotonic()
                if len(jobs) >= room or remaining <= 0:
                    break
                await asyncio.sleep(min(0.005, remaining))
        except REDIS_ERRORS as exc:
            self.outage.lost("claim", exc)
            self.record.claim_error = describe(exc)[:300]
            if not jobs:
                await self.outage.back_off(self._stop)
            return jobs
        self.outage.back()
        self.record.claim_error = None
        return jobs

    def _claimed(self, claims: list[Claim]) -> list[Job]:
        """The runnable jobs among ``claims``; counts those the claim dead-lettered, and first attempts' queue wait."""
        jobs = []
        for claim in claims:
            if not claim.runnable:
                self.metrics.ended("dead_lettered", claim.job.attempts)
                continue
            self.metrics.claimed(claim.job.tenant or "-", claim.job.priority)
            if claim.job.attempts == 1 and claim.job.started_at is not None:
                self.metrics.queue_wait.observe(max(0.0, claim.job.started_at - claim.job.created_at))
            jobs.append(claim.job)
        return jobs
