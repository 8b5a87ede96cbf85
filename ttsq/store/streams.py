"""A job's audio as it is produced, for progressive playback: the only code that speaks Redis about streams.

The worker publishes each sentence chunk's joined piece as PCM16 to the job's Redis Stream
(:class:`AudioStreams`); the script that ends the job, however it ends, ends the stream in the same step. Readers follow that
stream through the process's one listener (:func:`pcm_pieces`, :mod:`ttsq.store.listener`); a job that has no
stream (a cache hit, or a stream that expired) is served from its stored result instead, so every finished task
can be streamed. A stream expires with the job's result (``RESULT_TTL_S``).

The pieces are raw PCM16 LE mono 24 kHz; the API encodes them as they come, into whatever format a
listener asked for (:mod:`ttsq.domain.encoders`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from importlib.resources import files
from typing import Any

from ttsq.domain.audio import decode_to_pcm16
from ttsq.domain.jobs import Status
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Shards
from ttsq.store.listener import Entry, JobListener
from ttsq.store.queue import JobQueue
from ttsq.store.replies import appended, text

_PCM16_BYTES = 2


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

    async def publish(
        self,
        job_id: str,
        token: int,
        index: int,
        total: int,
        pcm: bytes,
        *,
        fresh: bool = False,
        spoken: tuple[int, int, str] | None = None,
        at: int | None = None,
        partial: bool = False,
    ) -> bool:
        """Append one piece of PCM16 audio (readers see it at once); ``fresh`` starts the stream afresh
        (a retried attempt re-synthesises from its first piece); ``spoken`` is where the chunk's speech starts and
        ends in the joined audio (samples) and its text as spoken, for live captions (``timing`` events); ``at`` is
        where the piece starts in the joined audio (samples; readers of a re-run attempt skip what they heard by it);
        ``partial``: its chunk is still being generated (more of chunk ``index`` follows). False: the claim ``token``
        is stale, and nothing was written."""
        start, end, words = spoken if spoken is not None else (-1, -1, "")
        placed = (-1 if at is None else at, "1" if partial else "0")
        reply = await self._append(
            keys=[self.shards.of(job_id).job(job_id), self.shards.of(job_id).stream(job_id)],
            args=[token, self.ttl_s, "1" if fresh else "0", index, total, pcm, start, end, words, *placed],
        )
        return appended(reply)

    async def progress(self, job_id: str) -> tuple[int, int] | None:
        """(chunks done, chunks total) of the current attempt, or None before its first piece."""
        last: Any = await self.redis.xrevrange(self.shards.of(job_id).stream(job_id), count=2)
        for _entry_id, fields in last:
            if b"total" in fields:
                return chunks_done(fields), int(fields[b"total"])
            if b"status" in fields:
                return None  # an attempt starts (or waits to): none of its pieces yet
        return None

    async def entries(self, job_id: str) -> list[Entry]:
        """Every entry of the job's stream, at once (a finished job's: nothing more will come)."""
        reply: Any = await self.redis.xrange(self.shards.of(job_id).stream(job_id))
        return [(text(entry_id), {text(k): v for k, v in fields.items()}) for entry_id, fields in reply]


def chunks_done(fields: Mapping[Any, bytes]) -> int:
    """Chunks whose audio is all published once a piece's stream entry is (keys as bytes or str): its chunk's
    predecessors, and itself unless more of it follows (a piece of a chunk still being generated)."""
    index = int(fields[b"index"] if b"index" in fields else fields["index"])
    partial = fields.get(b"partial", fields.get("partial", b"0"))
    return index if partial == b"1" else index + 1


class StreamFailed(Exception):
    """The job failed while (or before) its audio was being streamed."""


class _Pieces:
    """A reader's place in a job's pieces: a retried attempt republishes from its first piece, and audio already sent
    is skipped by its place in the joined audio (``at``, in samples; by chunk index for a piece published without it),
    an attempt being deterministic (the job carries its seed), so nothing is heard twice."""

    def __init__(self) -> None:
        self.next_index = 0
        self.next_at = 0
        self.streamed = False
        self.ended = False

    def take(self, entries: list[Entry]) -> list[bytes]:
        """The new audio in ``entries``, up to the end marker (markers of attempts starting or waiting carry none)."""
        audio = []
        for _entry_id, fields in entries:
            if "end" in fields:
                self.ended = True
                break
            if "pcm" not in fields:
                continue
            self.streamed = True
            pcm = fields["pcm"]
            at = int(fields.get("at", b"-1"))
            if at < 0:
                index = int(fields["index"])
                if index < self.next_index:
                    continue
                self.next_index = index + 1
            else:
                heard = max(0, self.next_at - at) * _PCM16_BYTES
                self.next_at = max(self.next_at, at + len(pcm) // _PCM16_BYTES)
                pcm = pcm[heard:]
            if pcm:
                audio.append(pcm)
        return audio


async def pcm_pieces(streams: AudioStreams, listener: JobListener, queue: JobQueue, job_id: str) -> AsyncIterator[bytes]:
    """Yield the job's PCM16 audio piece by piece until it is complete; :class:`StreamFailed` if it fails.

    A running job is followed through the process's listener (:mod:`ttsq.store.listener`): no blocking read or
    connection of its own. A finished job is read once: its stream's pieces, or (a cache hit, one chunk, an
    expired stream) its stored result.
    """
    pieces = _Pieces()
    job = await queue.get(job_id)
    if job is None:
        return
    if job.status.is_final:
        for piece in pieces.take(await streams.entries(job_id)):
            yield piece
    else:
        async with listener.follow(job_id) as subscription:
            entries = subscription.backlog
            while True:
                for piece in pieces.take(entries):
                    yield piece
                if pieces.ended:
                    break
                update = await subscription.next()
                if update.gone:
                    return
                entries = update.entries
        job = await queue.get(job_id)
        if job is None:
            return
    if job.status is Status.FAILED:
        raise StreamFailed(job.error or "the job failed")
    if job.status is Status.CANCELLED:
        raise StreamFailed("the task was cancelled")
    if job.status is Status.DONE and not pieces.streamed:
        audio = await queue.result(job_id)
        if audio is not None:
            yield audio if job.params.format == "pcm" else decode_to_pcm16(audio)
