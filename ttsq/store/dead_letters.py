"""Dead letters: the final records of jobs that failed for good, kept in a capped list per shard for an operator to
read, requeue or drop (``/v1/admin/dead-letters``, ``python -m ttsq dead-letters``). A requeue puts the job back under its
own id in one script (``lua/requeue_dead.lua``), as every change to a job is; the protocol that fails a job into the list
is :mod:`ttsq.store.queue`'s."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from ttsq.domain.jobs import Job
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Requeued, RequeueReply
from ttsq.store.scripts import home_queue, lua_script

log = logging.getLogger("ttsq.store.queue")  # where a requeue was logged before it had a module of its own


def _letters(raw: Iterable[bytes | str]) -> Iterator[Job]:
    """The letters as jobs (a stand-in for a record that does not load as it is: :meth:`Job.stored`). One that is no
    job record at all is skipped with a warning: it must not hide every other letter from the operator."""
    for item in raw:
        try:
            yield Job.stored(item)
        except ValueError as exc:  # pydantic's ValidationError and json's JSONDecodeError are ValueErrors
            log.warning("a dead letter is no job record at all (%s): skipped", str(exc)[:300])


class DeadLetters:
    """The dead-letter lists of ``queue``'s shards, on its connection, keys and clock."""

    def __init__(self, queue: JobQueue) -> None:
        self.redis = queue.redis
        self.shards = queue.shards
        self.clock = queue.clock
        self.config = queue.config
        self._requeue_dead = lua_script(queue.redis, "requeue_dead", timed=False, fair=True)

    async def newest(self, limit: int = 100) -> list[Job]:
        """The newest dead-lettered jobs' final records, newest first (over every shard)."""
        lists = await asyncio.gather(*(self.redis.lrange(keys.dead, 0, limit - 1) for keys in self.shards.all))
        jobs = [job for raw in lists for job in _letters(raw)]
        if self.shards.count > 1:
            jobs.sort(key=lambda job: job.finished_at or 0.0, reverse=True)
        return jobs[:limit]

    async def count(self) -> int:
        """How many dead letters are held (at most ``dead_letter_max`` per shard)."""
        return sum(await asyncio.gather(*(self.redis.llen(keys.dead) for keys in self.shards.all)))

    async def get(self, job_id: str) -> Job | None:
        """One dead letter's final record (its reason and attempts), or None."""
        raw = await self.redis.lrange(self.shards.of(job_id).dead, 0, -1)
        return next((job for job in _letters(raw) if job.id == job_id), None)

    async def requeue(self, job_id: str) -> Requeued:
        """Put a dead letter back in its shard's queue under its own id (see ``lua/requeue_dead.lua``)."""
        keys_of = self.shards.of(job_id)
        job = await self.get(job_id)
        if job is None:
            return Requeued.MISSING
        keys = [
            keys_of.dead,
            keys_of.queue,
            keys_of.job(job_id),
            keys_of.stream(job_id),
            keys_of.delivery_log(job_id),
            keys_of.owner_jobs(job.owner or "-"),
            home_queue(keys_of, job),
            keys_of.ring(job.lane),
            keys_of.weights,
        ]
        args: list[Any] = [job_id, self.clock.arg(), keys_of.fair_prefix, self.config.interactive_burst]
        reply = RequeueReply.parse(await self._requeue_dead(keys=keys, args=args))
        if reply.outcome is Requeued.REQUEUED:
            log.warning("dead letter %s requeued (position %s)", job_id, reply.position)
        return reply.outcome

    async def purge(self, job_id: str | None = None) -> int:
        """Drop one dead letter (or, with None, all of them); return how many went. Their task
        records still answer "failed" until they expire."""
        if job_id is None:
            counts = await asyncio.gather(*(self.redis.llen(keys.dead) for keys in self.shards.all))
            await asyncio.gather(*(self.redis.delete(keys.dead) for keys in self.shards.all))
            return sum(int(count) for count in counts)
        dead = self.shards.of(job_id).dead
        removed = 0
        for raw in await self.redis.lrange(dead, 0, -1):
            if any(job.id == job_id for job in _letters([raw])):
                removed += int(await self.redis.lrem(dead, 0, raw))  # type: ignore[arg-type]  # bytes are fine
        return removed
