"""The reliable job queue: the only code that speaks Redis commands about jobs.

Design (the "reliable queue" pattern):

* **enqueue** records the job (``SET NX``) and ``LPUSH``-es its id in one Lua script, so a retried
  enqueue (a lost reply, a client retry) never creates a second job.
* **claim** moves an id with ``BLMOVE`` from the queue into a processing list, then a script
  counts the attempt, marks the job running and grants a *lease* (a key with a PX expiry).
  The worker renews the lease while inference runs.
* **reap** looks at the processing list: an id whose lease has lapsed belonged to a dead worker
  and goes back to the front of the queue. Attempts are counted at claim time, so a job that kills
  its worker every time is dead-lettered after ``max_attempts`` claims.
* **complete / fail** write the result and the final status with an expiry (``SET ... EX``);
  a queued or running job has no expiry and never vanishes while it waits. Failed jobs keep their
  final record in a capped dead-letter list. Transient failures retry after ``base ** attempt`` s.

Every state change is a single Lua script, so a crash between two commands cannot leave a job
half-moved. Blocking reads are kept short (``block_s`` < the socket timeout) and are never
cancelled mid-flight, because a cancelled BLMOVE reply would leave an id in limbo until reaped.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from ttsq.jobs import Job, Status, TTSParams
from ttsq.keys import Keys

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueConfig:
    """Queue limits and timings. Built by ``settings.py``; validated there."""

    namespace: str = "ttsq"
    lease_s: float = 30.0
    max_attempts: int = 3
    result_ttl_s: int = 600
    max_result_bytes: int = 50 * 1024 * 1024
    max_queue_depth: int = 10_000
    block_s: float = 2.0
    retry_base_s: float = 2.0
    heartbeat_ttl_s: int = 15
    dead_letter_max: int = 10_000
    default_job_s: float = 5.0


class QueueFullError(Exception):
    """The queue holds ``max_queue_depth`` jobs or more; the client should come back later."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"the queue is full ({depth} jobs waiting); try again later")
        self.depth = depth


@dataclass(frozen=True)
class EnqueueResult:
    job: Job
    created: bool
    position: int | None
    estimate_s: float
    joined: bool = False


@dataclass(frozen=True)
class Claim:
    """A claimed job, or a job that the claim itself dead-lettered (``runnable`` is False)."""

    job: Job
    runnable: bool


# KEYS: job, queue, stats, workers [, inflight]
# ARGV: job_json, job_id, max_depth, stale_inflight_id, live_since
# With an inflight key (single-flight), an identical job already in flight is joined instead:
# the reply is {2, its id}. ``stale_inflight_id`` names an id the caller found finished, which
# may be replaced. A new job's reply carries what the wait estimate needs, so a submit costs one
# round trip: {1, depth, jobs done, busy seconds, live workers}.
_ENQUEUE = """
if #KEYS == 5 then
  local current = redis.call('GET', KEYS[5])
  if current and current ~= ARGV[4] then
    return {2, current}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('LLEN', KEYS[2])}
end
local depth = redis.call('LLEN', KEYS[2])
if depth >= tonumber(ARGV[3]) then
  return {-1, depth}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[2], ARGV[2])
if #KEYS == 5 then
  redis.call('SET', KEYS[5], ARGV[2])
end
local stats = redis.call('HMGET', KEYS[3], 'jobs', 'busy_s')
return {1, depth, stats[1], stats[2], redis.call('ZCOUNT', KEYS[4], ARGV[5], '+inf')}
"""

# KEYS: inflight   ARGV: job_id — forget a finished job's single-flight marker, if still its own
_CLEAR_INFLIGHT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: job, lease, processing, dead   ARGV: id, worker, now, lease_ms, ttl_s, dead_max
_START = """
local raw = redis.call('GET', KEYS[1])
if not raw then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return false
end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return false
end
job.attempts = job.attempts + 1
job.orphan_seen_at = nil
if job.attempts > job.max_attempts then
  job.status = 'failed'
  job.finished_at = tonumber(ARGV[3])
  job.error = 'gave up after ' .. job.max_attempts .. ' attempts; last error: ' ..
    (type(job.error) == 'string' and job.error or 'unknown')
  local out = cjson.encode(job)
  redis.call('SET', KEYS[1], out, 'EX', ARGV[5])
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  redis.call('LPUSH', KEYS[4], out)
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
  return {'dead', out}
end
job.status = 'running'
job.started_at = tonumber(ARGV[3])
job.worker = ARGV[2]
job.not_before = cjson.null
local out = cjson.encode(job)
redis.call('SET', KEYS[1], out)
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
return {'run', out}
"""

# KEYS: lease   ARGV: worker, lease_ms
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: job, result, lease, processing, stats [, inflight]
# ARGV: id, audio, ttl_s, now, duration_s, content_type, busy_s
_COMPLETE = """
redis.call('LREM', KEYS[4], 0, ARGV[1])
redis.call('DEL', KEYS[3])
if #KEYS == 6 and redis.call('GET', KEYS[6]) == ARGV[1] then
  redis.call('DEL', KEYS[6])
end
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' then return 0 end
job.status = 'done'
job.finished_at = tonumber(ARGV[4])
job.duration_s = tonumber(ARGV[5])
job.content_type = ARGV[6]
job.result_bytes = string.len(ARGV[2])
job.error = cjson.null
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('SET', KEYS[1], cjson.encode(job), 'EX', ARGV[3])
redis.call('HINCRBY', KEYS[5], 'jobs', 1)
redis.call('HINCRBYFLOAT', KEYS[5], 'busy_s', ARGV[7])
return 1
"""

# KEYS: job, lease, processing, delayed, dead [, inflight]
# ARGV: id, reason, retryable, now, retry_base_s, ttl_s, dead_max
_FAIL = """
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('DEL', KEYS[2])
local raw = redis.call('GET', KEYS[1])
if not raw then return {'gone', '0'} end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' then return {'gone', '0'} end
job.error = ARGV[2]
job.worker = cjson.null
local now = tonumber(ARGV[4])
if ARGV[3] == '1' and job.attempts < job.max_attempts then
  local delay = tonumber(ARGV[5]) ^ job.attempts
  job.status = 'queued'
  job.not_before = now + delay
  redis.call('SET', KEYS[1], cjson.encode(job))
  redis.call('ZADD', KEYS[4], now + delay, ARGV[1])
  return {'retry', tostring(delay)}
end
job.status = 'failed'
job.finished_at = now
local out = cjson.encode(job)
redis.call('SET', KEYS[1], out, 'EX', ARGV[6])
redis.call('LPUSH', KEYS[5], out)
redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[7]) - 1)
if #KEYS == 6 and redis.call('GET', KEYS[6]) == ARGV[1] then
  redis.call('DEL', KEYS[6])
end
return {'failed', '0'}
"""

# KEYS: job, lease, processing, queue   ARGV: id, now, grace_s
_REAP_ONE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local raw = redis.call('GET', KEYS[1])
if not raw then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return 0
end
local job = cjson.decode(raw)
if job.status == 'done' or job.status == 'failed' then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return 0
end
local now = tonumber(ARGV[2])
if job.status == 'queued' then
  -- Moved by BLMOVE but not yet started: either its worker died in between or the start
  -- script is a moment away. Only a second sighting after the grace period counts.
  if type(job.orphan_seen_at) ~= 'number' then
    job.orphan_seen_at = now
    redis.call('SET', KEYS[1], cjson.encode(job))
    return 0
  end
  if now - job.orphan_seen_at < tonumber(ARGV[3]) then return 0 end
end
if job.status == 'running' then
  job.error = 'worker lost during attempt ' .. job.attempts .. ' (lease expired)'
end
job.status = 'queued'
job.worker = cjson.null
job.orphan_seen_at = nil
redis.call('SET', KEYS[1], cjson.encode(job))
if redis.call('LREM', KEYS[3], 0, ARGV[1]) > 0 then
  redis.call('RPUSH', KEYS[4], ARGV[1])
end
return 1
"""

# KEYS: delayed, queue   ARGV: now, limit
_PROMOTE_DUE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('LPUSH', KEYS[2], id)
end
return #ids
"""


def _estimate(position: int, average_job_s: float, live_workers: int) -> float:
    return round((position + 1) * average_job_s / max(1, live_workers), 1)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class JobQueue:
    """Queue semantics over one Redis connection pool (``decode_responses=False``)."""

    def __init__(self, redis: Redis, config: QueueConfig) -> None:
        self.redis = redis
        self.config = config
        self.keys = Keys(config.namespace)
        self._enqueue = redis.register_script(_ENQUEUE)
        self._start = redis.register_script(_START)
        self._renew = redis.register_script(_RENEW)
        self._complete = redis.register_script(_COMPLETE)
        self._fail = redis.register_script(_FAIL)
        self._reap_one = redis.register_script(_REAP_ONE)
        self._promote_due = redis.register_script(_PROMOTE_DUE)
        self._clear_inflight = redis.register_script(_CLEAR_INFLIGHT)

    # ---- producer side -------------------------------------------------------------------

    async def enqueue(
        self, job_id: str, params: TTSParams, now: float | None = None, *, single_flight: bool = True
    ) -> EnqueueResult:
        """Record and queue a job; calling it again with the same id changes nothing.

        Single-flight: when ``params.cache_key`` is set and an identical job is queued or running,
        that job is returned instead (``joined=True``) and nothing new is queued.
        Raises :class:`QueueFullError` when ``max_queue_depth`` jobs are already waiting.
        """
        job = Job(
            id=job_id,
            params=params,
            max_attempts=self.config.max_attempts,
            created_at=time.time() if now is None else now,
        )
        keys = [self.keys.job(job_id), self.keys.queue, self.keys.stats, self.keys.workers]
        if single_flight and params.cache_key is not None:
            keys.append(self.keys.inflight(params.cache_key))
        stale = ""
        live_since = time.time() - self.config.heartbeat_ttl_s
        for _ in range(3):
            reply = await self._enqueue(
                keys=keys, args=[job.model_dump_json(), job_id, self.config.max_queue_depth, stale, live_since]
            )
            created, detail = reply[0], reply[1]
            if created != 2:
                break
            other = await self.get(_text(detail))
            if other is not None and not other.status.is_final:
                position = await self.position(other.id)
                estimate = await self.estimate_wait_s(position or 0)
                return EnqueueResult(job=other, created=False, position=position, estimate_s=estimate, joined=True)
            stale = _text(detail)
        else:
            raise RuntimeError("single-flight marker kept changing; giving up on this enqueue")
        if created == -1:
            raise QueueFullError(int(detail))
        depth = int(detail)
        if created == 0:
            existing = await self.get(job_id)
            if existing is not None:
                job = existing
            return EnqueueResult(job=job, created=False, position=depth, estimate_s=await self.estimate_wait_s(depth))
        jobs_done, busy_s, workers = reply[2], reply[3], int(reply[4])
        average = float(busy_s) / int(jobs_done) if jobs_done and int(jobs_done) else self.config.default_job_s
        return EnqueueResult(job=job, created=True, position=depth, estimate_s=_estimate(depth, average, workers))

    async def record_done(self, job_id: str, params: TTSParams, audio: bytes, content_type: str, duration_s: float) -> Job:
        """Record a task that is finished on arrival (a cache hit): status and result at once."""
        now = time.time()
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
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.result(job_id), audio, ex=self.config.result_ttl_s)
            pipe.set(self.keys.job(job_id), job.model_dump_json(), ex=self.config.result_ttl_s)
            await pipe.execute()
        return job

    async def shared_secret(self) -> bytes:
        """A random secret stored once in Redis, so every API replica signs task ids alike."""
        await self.redis.set(self.keys.task_id_secret, secrets.token_bytes(32), nx=True)
        secret = await self.redis.get(self.keys.task_id_secret)
        if not isinstance(secret, bytes):
            raise RuntimeError("the shared task-id secret vanished from Redis")
        return secret

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
        """Raise when Redis is unreachable (readiness)."""
        await self.redis.ping()

    async def depth(self) -> int:
        return int(await self.redis.llen(self.keys.queue))

    async def result(self, job_id: str) -> bytes | None:
        value = await self.redis.get(self.keys.result(job_id))
        return value if isinstance(value, bytes) else None

    async def average_job_s(self) -> float:
        jobs, busy = await self.redis.hmget(self.keys.stats, ["jobs", "busy_s"])
        if not jobs or int(jobs) == 0:
            return self.config.default_job_s
        return float(busy or 0) / int(jobs)

    async def estimate_wait_s(self, position: int) -> float:
        """Rough seconds until a job at ``position`` is done: the average job time spread over live workers."""
        return _estimate(position, await self.average_job_s(), await self.live_worker_count())

    async def dead_letters(self, limit: int = 100) -> list[Job]:
        raw = await self.redis.lrange(self.keys.dead, 0, limit - 1)
        return [Job.model_validate_json(item) for item in raw]

    # ---- consumer side -------------------------------------------------------------------

    async def claim(self, worker_id: str, block_s: float | None = None) -> Claim | None:
        """Wait up to ``block_s`` for a job, move it to processing and lease it to ``worker_id``."""
        timeout = self.config.block_s if block_s is None else block_s
        # Redis takes fractional block timeouts; redis-py's annotation says int.
        raw_id = await self.redis.blmove(
            self.keys.queue,
            self.keys.processing,
            timeout,  # type: ignore[arg-type]
            "RIGHT",
            "LEFT",
        )
        if raw_id is None:
            return None
        return await self._start_claimed(_text(raw_id), worker_id)

    async def claim_more(self, worker_id: str, count: int) -> list[Claim]:
        """Claim up to ``count`` more jobs without blocking (to fill a batch): two round trips, any count."""
        if count <= 0:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for _ in range(count):
                pipe.lmove(self.keys.queue, self.keys.processing, "RIGHT", "LEFT")
            job_ids = [_text(raw) for raw in await pipe.execute() if raw is not None]
        if not job_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                await self._start(keys=self._start_keys(job_id), args=self._start_args(job_id, worker_id), client=pipe)
            replies = await pipe.execute()
        claims = [await self._claim_from(job_id, reply) for job_id, reply in zip(job_ids, replies, strict=True)]
        return [claim for claim in claims if claim is not None]

    def _start_keys(self, job_id: str) -> list[str]:
        return [self.keys.job(job_id), self.keys.lease(job_id), self.keys.processing, self.keys.dead]

    def _start_args(self, job_id: str, worker_id: str) -> list[Any]:
        return [
            job_id,
            worker_id,
            time.time(),
            int(self.config.lease_s * 1000),
            self.config.result_ttl_s,
            self.config.dead_letter_max,
        ]

    async def _start_claimed(self, job_id: str, worker_id: str) -> Claim | None:
        reply = await self._start(keys=self._start_keys(job_id), args=self._start_args(job_id, worker_id))
        return await self._claim_from(job_id, reply)

    async def _claim_from(self, job_id: str, reply: Any) -> Claim | None:
        """Turn the start script's reply into a claim; a job dead-lettered at claim frees its single-flight marker."""
        if not reply:
            return None
        kind, raw = _text(reply[0]), reply[1]
        job = Job.model_validate_json(raw)
        if kind == "dead":
            log.warning("job %s dead-lettered at claim: %s", job_id, job.error)
            if job.params.cache_key is not None:
                await self._clear_inflight(keys=[self.keys.inflight(job.params.cache_key)], args=[job_id])
        return Claim(job=job, runnable=kind == "run")

    async def renew_lease(self, job_id: str, worker_id: str) -> bool:
        """Extend the lease; False means it was lost (reaped) and another worker may run the job."""
        renewed = await self._renew(keys=[self.keys.lease(job_id)], args=[worker_id, int(self.config.lease_s * 1000)])
        return bool(renewed)

    def _with_inflight(self, keys: list[str], cache_key: str | None) -> list[str]:
        return [*keys, self.keys.inflight(cache_key)] if cache_key is not None else keys

    async def complete(
        self,
        job_id: str,
        audio: bytes,
        content_type: str,
        duration_s: float,
        busy_s: float,
        cache_key: str | None = None,
    ) -> bool:
        """Store the result and mark the job done (both expire after ``result_ttl_s``).

        ``cache_key`` releases the job's single-flight marker, so later identical requests are
        served from the cache instead of joining a finished job.
        """
        if len(audio) > self.config.max_result_bytes:
            await self.fail(
                job_id,
                f"result is {len(audio)} bytes; the limit is {self.config.max_result_bytes}",
                retryable=False,
                cache_key=cache_key,
            )
            return False
        stored = await self._complete(
            keys=self._with_inflight(
                [
                    self.keys.job(job_id),
                    self.keys.result(job_id),
                    self.keys.lease(job_id),
                    self.keys.processing,
                    self.keys.stats,
                ],
                cache_key,
            ),
            args=[job_id, audio, self.config.result_ttl_s, time.time(), duration_s, content_type, busy_s],
        )
        return bool(stored)

    async def fail(self, job_id: str, reason: str, *, retryable: bool, cache_key: str | None = None) -> str:
        """Record a failed attempt: retry later with backoff, or fail for good and dead-letter.

        Returns ``"retry"``, ``"failed"`` or ``"gone"`` (the job had already finished or expired).
        """
        kind, _delay = await self._fail(
            keys=self._with_inflight(
                [
                    self.keys.job(job_id),
                    self.keys.lease(job_id),
                    self.keys.processing,
                    self.keys.delayed,
                    self.keys.dead,
                ],
                cache_key,
            ),
            args=[
                job_id,
                reason[:2000],
                "1" if retryable else "0",
                time.time(),
                self.config.retry_base_s,
                self.config.result_ttl_s,
                self.config.dead_letter_max,
            ],
        )
        return _text(kind)

    async def reap(self, now: float | None = None) -> int:
        """Requeue jobs whose worker is gone and release retries whose backoff is over."""
        moment = time.time() if now is None else now
        requeued = 0
        for raw_id in await self.redis.lrange(self.keys.processing, 0, -1):
            job_id = _text(raw_id)
            requeued += int(
                await self._reap_one(
                    keys=[self.keys.job(job_id), self.keys.lease(job_id), self.keys.processing, self.keys.queue],
                    args=[job_id, moment, self.config.lease_s],
                )
            )
        promoted = int(await self._promote_due(keys=[self.keys.delayed, self.keys.queue], args=[moment, 100]))
        if requeued:
            log.warning("reaper requeued %d job(s) whose worker stopped renewing its lease", requeued)
        if promoted:
            log.info("released %d job(s) whose retry backoff is over", promoted)
        return requeued

    # ---- streaming audio -----------------------------------------------------------------

    async def reset_stream(self, job_id: str) -> None:
        """Start an attempt's audio stream afresh (a retry re-synthesises from the first piece)."""
        await self.redis.delete(self.keys.stream(job_id))

    async def publish_piece(self, job_id: str, index: int, total: int, pcm: bytes) -> None:
        """Append one piece of PCM16 audio; readers see it at once. Expires with the result."""
        key = self.keys.stream(job_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(key, {"index": index, "total": total, "pcm": pcm})
            pipe.expire(key, self.config.result_ttl_s)
            await pipe.execute()

    async def end_stream(self, job_id: str) -> None:
        key = self.keys.stream(job_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(key, {"end": 1})
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
        now = time.time()
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
        now = time.time()
        return int(await self.redis.zcount(self.keys.workers, now - self.config.heartbeat_ttl_s, "+inf"))

    async def worker_records(self) -> list[dict[str, Any]]:
        now = time.time()
        ids = await self.redis.zrangebyscore(self.keys.workers, now - self.config.heartbeat_ttl_s, "+inf")
        if not ids:
            return []
        raw = await self.redis.mget([self.keys.worker(_text(i)) for i in ids])
        return [json.loads(item) for item in raw if item is not None]


async def check_eviction_policy(redis: Redis) -> str | None:
    """Return a warning when Redis may evict job keys, or None when the policy is ``noeviction``.

    Managed Redis services often forbid CONFIG; that is reported as a warning too, since the
    policy cannot be confirmed.
    """
    try:
        reply = await redis.config_get("maxmemory-policy")
    except Exception as exc:  # noqa: BLE001 - any refusal means "cannot confirm"
        return f"cannot read Redis maxmemory-policy ({exc}); make sure it is 'noeviction'"
    policy = _text(next(iter(reply.values()), b"unknown")) if reply else "unknown"
    if policy == "noeviction":
        return None
    return (
        f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may EVICT queued jobs "
        "and results, and accepted tasks would silently disappear. Set it to 'noeviction' "
        "(and put the result cache on its own Redis)."
    )
