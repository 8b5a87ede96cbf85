"""A job's audio as it is produced, for progressive playback: the only code that speaks Redis about streams.

The worker publishes each sentence chunk's joined piece as PCM16 to the job's Redis Stream
(:class:`AudioStreams`); the script that stores the job's result ends the stream in the same step. Readers follow that
stream (:func:`pcm_pieces`); a job that has no stream (a cache hit, or a stream that expired) is
served from its stored result instead, so every finished task can be streamed. A stream expires
with the job's result (``RESULT_TTL_S``).

The pieces are raw PCM16 LE mono 24 kHz; the API encodes them as they come, into whatever format a
listener asked for (:mod:`ttsq.domain.encoders`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any

from ttsq.domain.audio import decode_to_pcm16
from ttsq.domain.jobs import Status
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Shards
from ttsq.store.queue import JobQueue
from ttsq.store.replies import appended, text


class AudioStreams:
    """Every job's audio stream over one Redis connection pool; entries expire after ``ttl_s`` (``RESULT_TTL_S``).

    Writing is fenced like every other change to a running job: only the worker holding the job's
    current claim (its fencing token, :attr:`ttsq.domain.jobs.Job.claim`) may append, so a stale owner
    woken after its lease lapsed cannot interleave its pieces with the new owner's. The end marker is
    written by the queue's completing script itself (``complete.lua``), in the step that makes the job done.
    """

    def __init__(self, redis: RedisClient, shards: Shards, ttl_s: int) -> None:
        self.redis = redis
        self.shards = shards
        self.ttl_s = ttl_s
        self._append = redis.register_script(files("ttsq.store").joinpath("lua", "stream_append.lua").read_text())

    async def publish(self, job_id: str, token: int, index: int, total: int, pcm: bytes, *, fresh: bool = False) -> bool:
        """Append one piece of PCM16 audio (readers see it at once); ``fresh`` starts the stream afresh
        (a retried attempt re-synthesises from its first piece). False: the claim ``token`` is stale,
        and nothing was written."""
        reply = await self._append(
            keys=[self.shards.of(job_id).job(job_id), self.shards.of(job_id).stream(job_id)],
            args=[token, self.ttl_s, "1" if fresh else "0", index, total, pcm],
        )
        return appended(reply)

    async def read(self, job_id: str, after: str, block_ms: int | None) -> list[tuple[str, dict[str, bytes]]]:
        """Pieces after entry id ``after`` ("0" = from the start), waiting up to ``block_ms`` (None: no wait)."""
        reply: Any = await self.redis.xread({self.shards.of(job_id).stream(job_id): after}, count=64, block=block_ms)
        if not reply:
            return []
        [(_key, entries)] = reply
        return [(text(entry_id), {text(k): v for k, v in fields.items()}) for entry_id, fields in entries]

    async def last_id(self, job_id: str) -> str:
        """The id of the stream's newest entry ("0" without one): a reader that starts after it misses nothing written later."""
        last: Any = await self.redis.xrevrange(self.shards.of(job_id).stream(job_id), count=1)
        return text(last[0][0]) if last else "0"

    async def progress(self, job_id: str) -> tuple[int, int] | None:
        """(chunks done, chunks total) of the current attempt, or None before the first piece."""
        last: Any = await self.redis.xrevrange(self.shards.of(job_id).stream(job_id), count=2)
        for _entry_id, fields in last:
            if b"total" in fields:
                return int(fields[b"index"]) + 1, int(fields[b"total"])
        return None


class StreamFailed(Exception):
    """The job failed while (or before) its audio was being streamed."""


async def pcm_pieces(streams: AudioStreams, queue: JobQueue, job_id: str, block_ms: int = 1000) -> AsyncIterator[bytes]:
    """Yield the job's PCM16 audio piece by piece until it is complete.

    A retried attempt republishes from its first piece; pieces already sent are skipped by
    index (an attempt is deterministic: the job carries its seed), so the listener never hears
    a sentence twice.
    """
    after, next_index, streamed, wait = "0", 0, False, False
    while True:
        # The first read never blocks: a job that is already done (a cache hit) has no stream
        # to wait for, and its stored result is sent at once.
        entries = await streams.read(job_id, after, block_ms if wait else None)
        wait = True
        ended = False
        for entry_id, fields in entries:
            after = entry_id
            if "end" in fields:
                ended = True
                break
            streamed = True
            index = int(fields["index"])
            if index < next_index:
                continue
            next_index = index + 1
            if fields["pcm"]:
                yield fields["pcm"]
        if ended and streamed:
            return
        if entries and not ended:
            continue
        job = await queue.get(job_id)
        if job is None:
            return
        if job.status is Status.FAILED:
            raise StreamFailed(job.error or "the job failed")
        if job.status is Status.CANCELLED:
            raise StreamFailed("the task was cancelled")
        if job.status is Status.DONE:
            if not streamed:
                audio = await queue.result(job_id)
                if audio is not None:
                    yield audio if job.params.format == "pcm" else decode_to_pcm16(audio)
            return

