"""A job's audio as it is produced, for progressive playback: the only code that speaks Redis about streams.

The worker publishes each piece of the joined audio as PCM16 to the job's Redis Stream (:class:`AudioStreams`), with
its place in it (``at``, samples), every piece and in order (:meth:`ttsq.runtime.outcomes.Outcomes.publish`); the
script that ends the job, however it ends, ends the stream in the same step. Readers follow that stream through the
process's one listener (:func:`pcm_pieces`, :mod:`ttsq.store.listener`), each from its own sample offset
(:class:`AudioCursor`): what a reader passes on is a prefix of the job's stored audio, never audio with a hole; what
its stream does not give it (a cache hit, a job decoded whole, an expired stream, pieces missed) comes from the stored
result at that offset, so every finished task can be streamed. A stream expires with the job's result
(``RESULT_TTL_S``). docs/architecture.md ("Audio delivery") has the whole design.

The pieces are raw PCM16 LE mono 24 kHz; the API encodes them as they come, into whatever format a
listener asked for (:mod:`ttsq.domain.encoders`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16
from ttsq.domain.jobs import Job, Status
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Shards
from ttsq.store.listener import Entry, JobListener
from ttsq.store.queue import JobQueue
from ttsq.store.replies import appended, text

_PCM16_BYTES = 2
_PAGE_ENTRIES = 256
"""Entries read at once from a stream that is read whole (a finished job's, a document's on resume): a bound on memory."""
_PROGRESS_LOOKBACK = 64
"""Entries a document's progress read looks back over for the newest piece that completed a part."""


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
        part: int = 0,
        parts_done: int = 0,
    ) -> bool:
        """Append one piece of PCM16 audio (readers see it at once); ``fresh`` starts the stream afresh
        (a retried attempt re-synthesises from its first piece); ``spoken`` is where the chunk's speech starts and
        ends in the joined audio (samples) and its text as spoken, for live captions (``timing`` events); ``at`` is
        where the piece starts in the joined audio (samples; readers of a re-run attempt skip what they heard by it);
        ``partial``: its chunk is still being generated (more of chunk ``index`` follows); ``part``: the job's part its
        chunk belongs to, ``parts_done``: the parts wholly in the stream once this piece is (a document's next attempt
        goes on from there, :meth:`resume_point`). False: the claim ``token`` is stale, and nothing was written."""
        start, end, words = spoken if spoken is not None else (-1, -1, "")
        placed = (-1 if at is None else at, "1" if partial else "0")
        reply = await self._append(
            keys=[self.shards.of(job_id).job(job_id), self.shards.of(job_id).stream(job_id)],
            args=[token, self.ttl_s, "1" if fresh else "0", index, total, pcm, start, end, words, *placed, part, parts_done],
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

    async def entries(self, job_id: str, after: str | None = None, count: int | None = None) -> list[Entry]:
        """The entries of the job's stream after the entry id ``after`` (from its start: None), at most ``count`` of
        them (all: None). A finished job's stream is read in pages (:func:`pcm_pieces`): a document's holds all its audio."""
        low = "-" if after is None else f"({after}"
        reply: Any = await self.redis.xrange(self.shards.of(job_id).stream(job_id), min=low, count=count)
        return [(text(entry_id), {text(k): v for k, v in fields.items()}) for entry_id, fields in reply]

    async def document_progress(self, job_id: str) -> tuple[int, int] | None:
        """A document's progress as its stream has it: (parts published whole, the samples they make), from the newest
        piece that completed a part, whichever attempt wrote it; None before one did. Both only grow: parts complete in
        order, and a next attempt goes on after the last one complete (a part begun again is not counted twice)."""
        reply: Any = await self.redis.xrevrange(self.shards.of(job_id).stream(job_id), count=_PROGRESS_LOOKBACK)
        for _entry_id, fields in reply:
            done = completed_parts(fields)
            if done is not None:
                return done
        return None

    async def resume_point(self, job_id: str) -> ResumePoint:
        """Where a document's next attempt goes on: after the last part its stream holds whole (read in pages, so a
        document's audio never sits in memory at once), with the captions of what it holds."""
        point = ResumePoint()
        after: str | None = None
        while page := await self.entries(job_id, after, _PAGE_ENTRIES):
            after = page[-1][0]
            point.read(page)
        return point


@dataclass
class ResumePoint:
    """Where a document's audio stream stands: what its next attempt need not synthesise again.

    A document's stream is the joined audio in order, so what its finished parts said is a prefix of it: the parts
    up to :attr:`parts_done` are there whole, the next chunk's job-wide index is :attr:`index`, and the next speech
    starts at sample :attr:`at`. :attr:`timings` are the captions of those chunks (start, end, text, part), by index.
    A piece may be in the stream twice (an append retried across an outage, a part that an attempt had begun and
    the next one spoke again); the same chunk's final piece says the same each time.
    """

    parts_done: int = 0
    index: int = 0
    at: int = 0
    timings: dict[int, tuple[int, int, str, int]] = field(default_factory=dict)

    def read(self, entries: list[Entry]) -> None:
        """Take the next entries of the stream, in order."""
        for _entry_id, fields in entries:
            if "pcm" not in fields or "parts_done" not in fields:
                continue  # an attempt's marker, the end, or a piece of a worker that kept no parts
            index, start = int(fields["index"]), int(fields["start"])
            if fields.get("partial") == b"0" and start >= 0:
                self.timings[index] = (start, int(fields["end_at"]), text(fields["text"]), int(fields["part"]))
            done = int(fields["parts_done"])
            if done > self.parts_done and fields.get("partial") == b"0":
                self.parts_done, self.index = done, index + 1
                self.at = int(fields["at"]) + len(fields["pcm"]) // _PCM16_BYTES

    def captions(self) -> list[tuple[int, int, str, int]]:
        """The timings of the chunks before :attr:`index`, in order."""
        return [self.timings[index] for index in range(self.index) if index in self.timings]


def completed_parts(fields: Mapping[Any, bytes]) -> tuple[int, int] | None:
    """(parts published whole, the samples they make) once this stream entry is, if it is the piece that completed a
    part (keys as bytes or str); None for any other entry."""

    def get(name: str) -> bytes | None:
        return fields.get(name.encode(), fields.get(name))

    done, part, partial, pcm = get("parts_done"), get("part"), get("partial"), get("pcm")
    if done is None or part is None or pcm is None or partial != b"0" or int(part) != int(done) - 1:
        return None
    return int(done), max(int(get("at") or b"0"), 0) + len(pcm) // _PCM16_BYTES


def chunks_done(fields: Mapping[Any, bytes]) -> int:
    """Chunks whose audio is all published once a piece's stream entry is (keys as bytes or str): its chunk's
    predecessors, and itself unless more of it follows (a piece of a chunk still being generated)."""
    index = int(fields[b"index"] if b"index" in fields else fields["index"])
    partial = fields.get(b"partial", fields.get("partial", b"0"))
    return index if partial == b"1" else index + 1


class StreamFailed(Exception):
    """The job failed while (or before) its audio was being streamed, or its audio cannot be delivered whole."""


class StreamGap(StreamFailed):
    """The rest of the job's audio cannot be delivered after what this reader has heard: pieces were missed (while the
    job store was away) and the stored result is in a lossy format, whose samples are not the ones streamed; or the
    job store no longer has the job or its result. The reader ends with this error rather than pass on audio with a
    hole in it, or let a cut-off stream pass for the whole."""


EXACT_FORMATS = frozenset({"pcm", "wav"})
"""Stored formats whose samples are the streamed PCM16 exactly (libsndfile converts the same float samples the pieces
were written from to PCM_16 the same way, and keeps them as they are): a reader may continue from any sample offset of
the stored file. Not FLAC: lossless, but libsndfile's float-to-integer conversion for it differs from the raw one by a
step here and there (``tests/integration/store/test_delivery.py`` checks both)."""


class AudioCursor:
    """A reader's place in a job's audio: how many samples it has passed on, and never a piece that would leave a hole.

    Every piece says where it starts in the joined audio (``at``, samples). A piece that starts at or before what the
    reader has passed on (:attr:`delivered`) continues it: what was heard already is cut off (a re-run attempt
    republishes from its first piece, and an attempt is deterministic: the job carries its seed). A piece that starts
    beyond it would leave a hole, so it is held back (:attr:`missed`), and so is every later piece of its attempt; what
    fills the hole is a re-run attempt's pieces (from its first) or, once the job is done, its stored result from this
    offset (:func:`pcm_pieces`). A piece published without ``at`` (an older worker's) is placed by its chunk index the
    same way. The end marker ends the reading (markers of attempts starting or waiting carry no audio).
    """

    def __init__(self) -> None:
        self.delivered = 0
        """Samples passed on so far: the reader's offset in the joined audio."""
        self.next_index = 0
        self.missed = False
        """A piece was held back because it started beyond :attr:`delivered`."""
        self.ended = False

    def take(self, entries: list[Entry]) -> list[bytes]:
        """The audio in ``entries`` that continues what was passed on, up to the end marker."""
        audio = []
        for _entry_id, fields in entries:
            if "end" in fields:
                self.ended = True
                break
            if "pcm" not in fields:
                continue
            pcm = fields["pcm"]
            at = int(fields.get("at", b"-1"))
            if at < 0:
                index = int(fields["index"])
                if index > self.next_index:
                    self.missed = True
                    continue
                if index < self.next_index:
                    continue
                self.next_index = index + 1
            elif at > self.delivered:
                self.missed = True
                continue
            else:
                pcm = pcm[(self.delivered - at) * _PCM16_BYTES :]
            if pcm:
                audio.append(pcm)
                self.delivered += len(pcm) // _PCM16_BYTES
        return audio


async def pcm_pieces(streams: AudioStreams, listener: JobListener, queue: JobQueue, job_id: str) -> AsyncIterator[bytes]:
    """Yield the job's PCM16 audio piece by piece until it is complete; :class:`StreamFailed` if it fails.

    Whatever is yielded, joined, is a prefix of the job's stored audio (for a done job: all of it), never audio with a
    hole: a piece the reader missed (:class:`AudioCursor`) is made good from a re-run attempt's pieces or, once the job
    is done, from its stored result at the reader's offset; where neither can, :class:`StreamGap` ends it. Every route
    that streams a task's audio reads it here (the realtime session, ``/v1/tts/stream``, the OpenAI route's bodies).

    A running job is followed through the process's listener (:mod:`ttsq.store.listener`): no blocking read or
    connection of its own. A finished job is read once: its stream's pieces, then what they did not cover (all of it
    for a cache hit, a job decoded whole, an expired stream) from its stored result. Every read rides a Redis outage
    out as a pause (:meth:`JobListener.read`): :class:`~ttsq.store.listener.ListenerOutage` only past ``LISTEN_OUTAGE_S``.
    """
    cursor = AudioCursor()
    job = await listener.read(lambda: queue.get(job_id))
    if job is None:
        return
    if job.status.is_final:  # read in pages: a document's stream is all its audio
        after: str | None = None
        while not cursor.ended and (page := await listener.read(functools.partial(streams.entries, job_id, after, _PAGE_ENTRIES))):
            after = page[-1][0]
            for piece in cursor.take(page):
                yield piece
    else:
        async with listener.follow(job_id) as subscription:
            entries = subscription.backlog
            while True:
                for piece in cursor.take(entries):
                    yield piece
                if cursor.ended:
                    break
                update = await subscription.next()
                if update.gone:
                    raise StreamGap("the job store (Redis) lost the task while it ran (it restarted without its data)")
                entries = update.entries
        job = await listener.read(lambda: queue.get(job_id))
        if job is None:
            raise StreamGap("the job store (Redis) lost the task as it ended (it restarted without its data)")
    if job.status is Status.FAILED:
        raise StreamFailed(job.error or "the job failed")
    if job.status is Status.CANCELLED:
        raise StreamFailed("the task was cancelled")
    if job.status is Status.DONE:
        rest = await _rest_of_result(queue, listener, job, cursor)
        if rest:
            yield rest


def stored_samples(job: Job) -> int | None:
    """How many samples a done job's audio has (its recorded duration), or None where a record has none."""
    return None if job.duration_s is None else round(job.duration_s * SAMPLE_RATE)


async def _rest_of_result(queue: JobQueue, listener: JobListener, job: Job, cursor: AudioCursor) -> bytes:
    """The samples of a done job's audio after the reader's offset, from its stored result: nothing (and no read) when
    its stream gave it all; the rest, exactly, from a file whose samples are the streamed ones (:data:`EXACT_FORMATS`);
    the whole file decoded for a reader that has had nothing yet. Anything else cannot continue what was heard without
    a seam: :class:`StreamGap`."""
    delivered, total = cursor.delivered, stored_samples(job)
    # A record without its duration (an older release's): a stream heard with nothing missed was all of it.
    heard_all = delivered > 0 and not cursor.missed if total is None else delivered >= total
    if heard_all:
        return b""
    if job.params.document:
        raise StreamGap("the document's audio stream is incomplete (it expired, or the job store lost part of it)")
    audio = await listener.read(lambda: queue.result(job.id))
    if audio is None:
        raise StreamGap("the task's audio expired before all of it was streamed (RESULT_TTL_S); submit it again")
    fmt = job.params.format
    if fmt in EXACT_FORMATS:
        pcm = audio if fmt == "pcm" else decode_to_pcm16(audio)
        return pcm[delivered * _PCM16_BYTES :]
    if delivered == 0:
        return decode_to_pcm16(audio)
    raise StreamGap(
        f"{delivered / SAMPLE_RATE:.2f} s of audio were streamed, then pieces were missed while the job store was "
        f"unreachable, and the stored {fmt} file (a lossy format) cannot continue them exactly: fetch the whole result "
        f"from /v1/tts/result/{job.id} instead"
    )
