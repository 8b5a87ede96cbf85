"""Listening: a task's events (``status`` and live ``timing`` cues), its audio as it is produced, its captions, and the
process's stream slots those streams hold.

Everything here follows a task through the process's one :class:`~ttsq.store.listener.JobListener`; what a task is and
who may see it are :mod:`.tasks`' answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ttsq.api.auth import Principal
from ttsq.api.service.common import ends_for_reader
from ttsq.api.service.tasks import TaskService
from ttsq.api.stream_admission import NoWorker
from ttsq.api.stream_slots import StreamAborted, StreamKind, StreamSlots, hold
from ttsq.domain.audio import SAMPLE_RATE, stored_as
from ttsq.domain.captions import srt, vtt
from ttsq.domain.converter import converted
from ttsq.domain.jobs import Job, Status
from ttsq.domain.output_formats import OutputFormat, stored_format
from ttsq.store.streams import StreamFailed, StreamGap, chunks_done, completed_parts, pcm_pieces

log = logging.getLogger("ttsq.api")

CaptionFormat = Literal["srt", "vtt", "json"]
CAPTION_CONTENT_TYPES: dict[str, str] = {
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "json": "application/json",
}

STATUS_EVENT_FIELDS = {"task_id", "status", "queue_position", "chunks_done", "chunks_total", "audio_s", "error"}
"""What a ``status`` event says of a task (:class:`ttsq.api.schemas.TaskEvent`)."""
_ENTRY_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event of a task's event stream: its ``id`` (the id of the task's stream entry it reflects, so
    that ``Last-Event-ID`` resumes right after it), its name and its JSON data."""

    id: str
    kind: Literal["status", "timing"]
    data: dict[str, Any]


class ListeningService:
    """A task followed as it runs: its events, its audio as it is made, its captions, and the stream slots a follower
    holds; every one rides the process's one listener and asks :class:`TaskService` what the task is."""

    def __init__(self, tasks: TaskService, stream_slots: StreamSlots) -> None:
        self.tasks = tasks
        self.queue = tasks.queue
        self.streams = tasks.streams
        self.listener = tasks.listener
        self.stream_slots = stream_slots
        self._positions: dict[str, asyncio.Future[int | None]] = {}

    @staticmethod
    def captions(job: Job, fmt: CaptionFormat) -> str | None:
        """A finished job's cues as SubRip, WebVTT or a JSON list (:mod:`ttsq.domain.captions`); None when its
        worker recorded none (a result stored before captions were recorded)."""
        if job.captions is None:
            return None
        if fmt == "srt":
            return srt(job.captions, SAMPLE_RATE)
        if fmt == "vtt":
            return vtt(job.captions, SAMPLE_RATE)
        return json.dumps([cue.as_json(SAMPLE_RATE) for cue in job.captions], ensure_ascii=False)

    async def events(self, job: Job, caller: Principal, last_event_id: str | None = None) -> AsyncGenerator[list[ServerEvent]]:
        """The task's ``status``, as ``caller`` sees it, each time it changes, and a ``timing`` event (a live caption
        cue) as each chunk's audio is published, until the task ends.

        Pushed, not polled: the events come from the task's stream through the process's listener, which marks an
        attempt starting or waiting, each piece, a detached caller and the end. A queued task's position is read
        again only when jobs left its shard's queue (``claim.lua``/``cancel.lua`` note it), once per task however
        many clients follow it. Each event's id is the stream entry it reflects: with ``last_event_id`` (SSE's
        ``Last-Event-ID``) the stream resumes after it, repeating no ``timing`` event and missing none (a ``status``
        event, which states where the task stands, is sent again first).

        Yielded in batches: the events that one read of the stream gives (a piece's ``timing`` and ``status``), so that
        the route writes them at once. With a thousand clients on one process each write is a system call (about a
        third of the API's time from a piece's publication to its clients' first byte, ``bench.listening.listeners``), and one
        write per client per piece is half the calls of two.

        While the task has not ended, :class:`~ttsq.api.stream_admission.NoWorker` once no worker is alive to end it:
        asked of the process's shared answer each time the stream has news or has been quiet for its refresh.
        """
        workers = self.tasks.workers
        quiet_s = workers.refresh_s if workers.on else None
        after = last_event_id if last_event_id is not None and _ENTRY_ID.fullmatch(last_event_id) else "0"
        cued = -1  # a re-run attempt republishes its cues from the first (an attempt is deterministic): each is sent once

        def add_cue(batch: list[ServerEvent], entry_id: str, fields: dict[str, bytes]) -> None:
            """The entry's ``timing`` event, unless it is no piece or its cue was sent already."""
            nonlocal cued
            cue = _timing(fields)
            if cue is not None and cue["index"] > cued:
                cued = cue["index"]
                batch.append(ServerEvent(entry_id, "timing", cue))

        async with self.listener.follow(job.id, after) as subscription:
            batch: list[ServerEvent] = []
            for entry_id, fields in subscription.backlog:
                add_cue(batch, entry_id, fields)
            position = subscription.seen
            current = await self.tasks.job(job.id, caller)
            last = await self._status_event(current)
            yield [*batch, ServerEvent(position, "status", last)]
            while not current.status.is_final:
                update = await subscription.next(quiet_s)
                if update.gone:
                    return
                batch = []
                for entry_id, fields in update.entries:
                    add_cue(batch, entry_id, fields)
                    if ends_for_reader(fields):
                        current = await self.tasks.job(job.id, caller)
                        event = await self._status_event(current)
                    elif job.params.document:
                        event = _document_progress(last, fields)
                    else:
                        event = await self._follow(job.id, last, fields)
                    if event != last:
                        batch.append(ServerEvent(entry_id, "status", event))
                        last = event
                    if current.status.is_final:
                        break
                if update.moved and last["status"] == Status.QUEUED.value and not current.status.is_final:
                    seen = subscription.seen
                    moved_to = await self._position(job.id)
                    # None: the task itself left the queue; its own stream says how (an attempt starts, or it ended).
                    if moved_to is not None and moved_to != last["queue_position"]:
                        last = {**last, "queue_position": moved_to}
                        batch.append(ServerEvent(seen, "status", last))
                if batch:
                    yield batch
                if not current.status.is_final:
                    await workers.require()
            if current.status is Status.DONE and current.captions is not None and await self.streams.progress(job.id) is None:
                # A job whose stream holds no piece (one chunk, a cache hit, an attempt that could not publish) has its
                # cues only in its record: those not sent yet are sent from there.
                cues = [
                    ServerEvent(position, "timing", _cue_event(caption.index, caption.start, caption.end, caption.text))
                    for caption in current.captions[cued + 1 :]
                ]
                if cues:
                    yield cues

    async def _status_event(self, job: Job) -> dict[str, Any]:
        return (await self.tasks.status(job)).model_dump(mode="json", include=STATUS_EVENT_FIELDS)

    async def _follow(self, job_id: str, last: dict[str, Any], fields: dict[str, bytes]) -> dict[str, Any]:
        """The status event after one stream entry that does not end the task."""
        if "pcm" in fields:
            done, total = chunks_done(fields), int(fields["total"])
            return {**last, "status": Status.RUNNING.value, "queue_position": None, "chunks_done": done, "chunks_total": total}
        if fields.get("status") == b"running":
            return {**last, "status": Status.RUNNING.value, "queue_position": None, "chunks_done": None, "chunks_total": None}
        if fields.get("status") == b"queued":  # a retry waits out its backoff: not in line, no position
            return {**last, "status": Status.QUEUED.value, "queue_position": await self._position(job_id), "chunks_done": None}
        return last

    async def _position(self, job_id: str) -> int | None:
        """The task's queue position, read once for every client of this process that asks at the same moment."""
        pending = self._positions.get(job_id)
        if pending is None:
            pending = self._positions[job_id] = asyncio.ensure_future(self.queue.position(job_id))
            pending.add_done_callback(lambda _: self._positions.pop(job_id, None))
        return await asyncio.shield(pending)

    def open_stream(self, caller: Principal, request_state: Any, kind: StreamKind = "long_poll") -> None:
        """Take one of this process's stream slots for ``caller`` (kept in ``request_state`` until the response is over),
        or raise :class:`ttsq.api.stream_slots.TooManyStreams`: a stream holds memory and a subscription to the listener for
        as long as its task lasts, so this process serves ``MAX_STREAMS`` at once, ``MAX_STREAMS_PER_KEY`` of them to one
        caller and ``MAX_STREAMS_PER_TENANT`` to one tenant."""
        hold(self.stream_slots, caller.subject, request_state, caller.tenant, kind)

    def open_session(self, caller: Principal) -> Callable[[], None]:
        """Take one of the same stream slots as :meth:`open_stream` for ``caller``'s realtime session (kind ``session``),
        or raise :class:`ttsq.api.stream_slots.TooManyStreams`. Returns what gives it back: a WebSocket has no response
        whose end would, so the session engine calls it when the connection ends, whatever ended it."""
        return self.stream_slots.take(caller.subject, caller.tenant, "session")

    async def require_workers(self, job: Job | None = None) -> None:
        """Before a response that waits on ``job`` (None: one just queued) starts:
        :class:`~ttsq.api.stream_admission.NoWorker` when the job has not ended and no worker is alive to run it (a 503
        the client can act on, not a stream of nothing)."""
        if job is None or not job.status.is_final:
            await self.tasks.workers.require()

    async def audio(
        self, task_id: str, fmt: OutputFormat, pcm: AsyncIterator[bytes] | None = None, *, failure_aborts: bool = False
    ) -> AsyncIterator[bytes]:
        """The task's audio in ``fmt`` as it is produced (:meth:`encoded`), for a raw body: the task's failure ends it
        quietly (the status code is sent already; the task's status says why), or, with ``failure_aborts``, breaks it
        off (for a protocol whose clients have no task to ask: Cartesia's take a clean end for the whole utterance).
        Audio that cannot be delivered whole (:class:`StreamGap`) and the last worker gone break it off
        (:class:`~ttsq.api.stream_slots.StreamAborted`: a raw body has no way to say so but an unfinished end, so that
        no client takes what it received for the whole file)."""
        try:
            async for piece in self.encoded(task_id, fmt, pcm):
                yield piece
        except StreamGap as exc:
            raise StreamAborted(str(exc)) from None
        except StreamFailed as exc:
            if failure_aborts:
                raise StreamAborted(str(exc)) from None
            return
        except NoWorker as exc:
            raise StreamAborted(str(exc)) from None

    def encoded(self, task_id: str, fmt: OutputFormat, pcm: AsyncIterator[bytes] | None = None) -> AsyncIterator[bytes]:
        """The task's audio in ``fmt`` as it is produced: its PCM16 pieces (``pcm``, else :meth:`pcm`) through a
        streaming converter (:mod:`ttsq.domain.converter`: resampled, encoded, framed), so that everything yielded,
        joined, is one file; :class:`StreamFailed` if the task fails."""
        return converted(self.pcm(task_id) if pcm is None else pcm, fmt)

    @staticmethod
    async def stored(job: Job, audio: bytes, fmt: OutputFormat) -> bytes:
        """A finished task's stored file (``audio``) as ``fmt``: itself when it is that format, else converted from its
        samples (:func:`ttsq.domain.audio.stored_as`), off the event loop (decoding and encoding a whole result costs
        milliseconds per second of audio)."""
        if stored_format(fmt) == job.params.format:
            return audio
        return await asyncio.to_thread(stored_as, audio, job.params.format, fmt)

    async def started(self, task_id: str) -> AsyncIterator[bytes]:
        """The task's PCM16 pieces (:meth:`pcm`) once the first one is there: a task that fails before any audio
        raises :class:`StreamFailed` here, while an answer can still say so in its status code."""
        pieces = self.pcm(task_id)
        first = await anext(pieces, None)
        return _after(first, pieces)

    def pcm(self, task_id: str) -> AsyncIterator[bytes]:
        """The task's PCM16 pieces as they are produced; :class:`StreamFailed` if it fails,
        :class:`~ttsq.api.stream_admission.NoWorker` once no worker is alive to make the rest."""
        return self.tasks.workers.watching(pcm_pieces(self.streams, self.listener, self.queue, task_id))


async def _after(first: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first`` (when there is one), then ``rest``: a stream whose first piece was taken to look at it."""
    if first is not None:
        yield first
    async for piece in rest:
        yield piece


def _cue_event(index: int, start: int, end: int, spoken: str) -> dict[str, Any]:
    return {
        "index": index,
        "start": start,
        "end": end,
        "start_s": start / SAMPLE_RATE,
        "end_s": end / SAMPLE_RATE,
        "text": spoken,
    }


def _timing(fields: dict[str, bytes]) -> dict[str, Any] | None:
    """A piece's ``timing`` event: where its chunk's speech lies in the joined audio, and its text (None for entries
    that are not pieces, and for pieces published without their timing)."""
    if "pcm" not in fields or int(fields.get("start", b"-1")) < 0:
        return None
    return _cue_event(int(fields["index"]), int(fields["start"]), int(fields["end_at"]), fields["text"].decode())


def _document_progress(last: dict[str, Any], fields: dict[str, bytes]) -> dict[str, Any]:
    """A document's status event after one stream entry that does not end it: on the piece that completes a part, its
    parts published whole and the audio they make, which only grow (a next attempt goes on after them); an attempt
    starting or waiting changes only its status."""
    completed = completed_parts(fields)
    if completed is not None:
        done, samples = completed
        return {
            **last,
            "status": Status.RUNNING.value,
            "queue_position": None,
            "chunks_done": done,
            "audio_s": samples / SAMPLE_RATE,
        }
    if fields.get("status") in (b"running", b"queued"):
        return {**last, "status": fields["status"].decode(), "queue_position": None}
    return last
