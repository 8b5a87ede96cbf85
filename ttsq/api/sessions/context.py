"""One context: a stream of text spoken in order, from its first piece to its last chunk's audio.

A context cuts its text as it arrives (:class:`ttsq.domain.text_stream.TextStream`) and queues each chunk at once as a
job of its own, through the same submit as every other request (validation, pronunciation dictionary, rate limit, fair
queue, cache, single-flight), so the API still runs no inference and a worker that dies mid-sentence costs a retry,
never the context. Chunk ``i`` of a context is queued with ``first_chunk=i`` (:class:`ttsq.domain.jobs.TTSParams`): it
draws the random stream chunk ``i`` of the same text submitted whole would draw, so the context's audio equals that
submit's wherever the cuts agree, with the same pause between chunks as a joined text has. Every chunk also carries
the context's place as one stream (:class:`ttsq.domain.jobs.StreamPlace`: the session's and context's ids, the chunk's
index, the audio its listener still had to play): a chunk after the first continues a stream already playing, so the
queue serves it before new streams' first chunks and its worker makes it due when that listener runs out of audio.

Pacing: a context keeps ``REALTIME_AHEAD`` chunks queued beyond the one whose audio is streaming, and queues the next
when a chunk's first audio goes out. Its audio goes out in text order, each chunk's as its worker streams it
(:meth:`ListeningService.pcm`: a prefix of the job's stored audio, or :class:`StreamFailed`), through the context's
converter (:mod:`ttsq.domain.converter`, into its output format), once it is the context's turn to send
(:attr:`Context.turn`: a protocol whose audio frames carry no context id sends one context's audio at a time).

Cancelling a context, or its connection ending first, abandons every chunk whose audio was not all sent: a context
gives up only its own interest in a job (:meth:`TaskService.abandon`), so a job another context or request joined
(single-flight) goes on for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ttsq.api.auth import Principal
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import InvalidInput, TaskNotFound, TTSService
from ttsq.api.sessions.events import (
    Audio,
    ContextDone,
    ContextId,
    ContextOptions,
    Event,
    Failure,
    Flushed,
    RealtimeConfig,
    SegmentDone,
    SegmentQueued,
)
from ttsq.api.sessions.wire import ConnectionEnded
from ttsq.domain.audio import SAMPLE_RATE, sentence_gap_pcm16
from ttsq.domain.converter import converter
from ttsq.domain.jobs import StreamPlace
from ttsq.domain.text_stream import TextStream
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.queue import QueueFullError
from ttsq.store.rate_limit import RateLimitExceeded
from ttsq.store.streams import StreamFailed

__all__ = ["Context", "Host"]

log = logging.getLogger("ttsq.api.realtime")
T = TypeVar("T")

GAP = sentence_gap_pcm16()
"""The pause before every chunk of a context but its first (:data:`ttsq.domain.audio.SENTENCE_GAP_MS`)."""


class Host(Protocol):
    """What a context asks of its connection (:class:`.connection.Connection`)."""

    id: str
    service: TTSService
    caller: Principal
    config: RealtimeConfig
    clock: Callable[[], float]

    async def emit(self, event: Event) -> None: ...

    def check_allowed(self) -> None: ...

    def touch(self) -> None: ...

    async def ride_out(self, call: Callable[[], Awaitable[T]], what: str) -> T: ...

    def guard(self, work: Awaitable[None]) -> asyncio.Task[None]: ...

    def context_over(self, context: Context) -> None: ...


@dataclass
class Segment:
    index: int
    """Its place among the context's queued chunks (its ``first_chunk``)."""
    number: int
    """Its place among the chunks cut (refused ones included)."""
    text: str
    task_id: str
    started: bool = False
    """Its first audio has gone out."""
    sent: bool = False


class Context:
    """One context of a connection: its text cut into chunks, each queued at its place, its audio sent in order."""

    def __init__(self, host: Host, context_id: ContextId, options: ContextOptions) -> None:
        self.host = host
        self.id = context_id
        self.options = options
        self.text = TextStream(host.config.max_chunk_chars)
        self.segments: list[Segment] = []
        self.waiting: deque[tuple[int, str]] = deque()
        """Chunks cut and not yet queued (:attr:`RealtimeConfig.ahead`), with their numbers."""
        self.closed = False
        """No more text comes (its client closed it): the rest is spoken, then it is over."""
        self.over = False
        self._end_told = False
        self.chars = 0
        self.samples = 0
        """Audio sent so far, in samples at 24 kHz (the pauses between chunks included)."""
        self.first_audio_at: float | None = None
        """When its first audio went out (the host's clock): its listener's playback starts then."""
        self.cut = 0
        """Chunks cut so far: the next one's number."""
        self.resolved = 0
        """How many of its first chunks are done with: each one's audio all sent, or it was refused, or it failed."""
        self._resolved_later: set[int] = set()
        """Chunks done with while one before them is not yet (a chunk refused while the one before it still speaks)."""
        self._marks: list[tuple[int, object]] = []
        """Flushes waiting to be acknowledged: how many chunks had been cut by then, and the client's mark."""
        self.clause_due: float | None = None
        """When text without a sentence end is spoken up to its last clause mark (``REALTIME_CLAUSE_WAIT_S``)."""
        self.turn = asyncio.Event()
        """Set once this context may send its audio (at once where audio frames carry a context id)."""
        self.converter = converter(options.output)
        """Its audio into its output format, one stream from its first piece to its end (a resampler's filter and an
        encoder's frames carry across pieces)."""
        self._pumping = asyncio.Lock()
        self._to_send: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.sender = host.guard(self._send_audio())

    @property
    def pending(self) -> bool:
        """Whether some of its audio is still to come: chunks waiting to be queued, or queued and not all sent."""
        return bool(self.waiting) or any(not segment.sent for segment in self.segments)

    def unspoken(self) -> str:
        """What of its text was never spoken: the chunks not yet sent and the text not yet cut into one."""
        left = [segment.text for segment in self.segments if not segment.sent] + [text for _, text in self.waiting]
        return " ".join([*left, self.text.pending.strip() if self.text.has_speech else ""]).strip()

    async def feed(self, piece: str, whole: bool = False) -> None:
        """More text; ``whole``: its sender cuts its text into whole sentences (:meth:`TextStream.feed`)."""
        self.chars += len(piece)
        await self._queue(self.text.feed(piece, whole))
        self.clause_due = self.host.clock() + self.host.config.clause_wait_s if self.text.has_speech else None

    async def flush(self, mark: object = None) -> None:
        """Speak what has arrived now, sentence or not; with a ``mark``, :class:`Flushed` once all of it is resolved."""
        self.clause_due = None
        chunks = [] if self.closed else self.text.flush()
        if mark is not None:
            self._marks.append((self.cut + len(chunks), mark))
        await self._queue(chunks)
        await self._acknowledge()

    async def clauses(self) -> None:
        """The clause wait ran out: speak up to the last sentence end or clause mark."""
        self.clause_due = None
        await self._queue(self.text.clauses())

    async def finish(self) -> None:
        """No more text: the rest is spoken, then the context is over (:class:`ContextDone`)."""
        self.clause_due = None
        self.closed = True
        await self._queue(self.text.close())

    async def cancel(self) -> None:
        """Stop now: nothing more is queued or sent, and every chunk not all sent is abandoned."""
        if self.over:
            return
        self.over = True
        self.closed = True
        self.clause_due = None
        self.waiting.clear()
        async with self._pumping:  # a submit under way lands first, so that its chunk is abandoned too
            self.sender.cancel()
        self.converter.close()
        await self.abandon_unsent()
        try:
            await self.host.emit(ContextDone(self.id, True, len(self.segments), self.samples, self.chars))
        finally:
            self.host.context_over(self)

    async def _queue(self, chunks: list[str]) -> None:
        """Take newly cut chunks; queue what :attr:`RealtimeConfig.ahead` allows now."""
        for chunk in chunks:
            self.waiting.append((self.cut, chunk))
            self.cut += 1
        await self._pump()

    async def _acknowledge(self) -> None:
        """Say :class:`Flushed` for each mark whose chunks are all resolved."""
        while self._marks and self._marks[0][0] <= self.resolved:
            _, mark = self._marks.pop(0)
            await self.host.emit(Flushed(self.id, mark))

    async def _resolve(self, number: int) -> None:
        """Chunk ``number`` is done with: acknowledge the flushes it completes."""
        self._resolved_later.add(number)
        while self.resolved in self._resolved_later:
            self._resolved_later.remove(self.resolved)
            self.resolved += 1
        await self._acknowledge()

    async def _pump(self) -> None:
        """Queue waiting chunks, in order, while fewer than ``ahead`` queued ones have no audio out yet; once the
        input has ended and nothing waits, tell the sender that no more will come."""
        async with self._pumping:
            while self.waiting and sum(not s.started and not s.sent for s in self.segments) < self.host.config.ahead:
                if self.over:
                    return
                self.host.check_allowed()
                await self._submit(*self.waiting.popleft())
            if self.closed and not self.waiting and not self._end_told:
                self._to_send.put_nowait(None)
                self._end_told = True

    async def _submit(self, number: int, chunk: str) -> None:
        """Queue ``chunk`` as a task at its place in the context (``first_chunk``), through a Redis outage of up to
        ``LISTEN_OUTAGE_S``. A try whose answer was lost may have queued its job already: single-flight joins the
        next try to it (or, where single-flight is off, that job runs unheard)."""
        index = len(self.segments)
        options = self.options
        stream = StreamPlace(id=f"{self.host.id}:{self.id}", chunk=index, buffered_s=self.buffered_s())
        body = SubmitRequest.model_validate(
            {
                "text": chunk,
                "voice": options.voice.name if options.voice is not None else None,
                "seed": options.seed,
                "format": "pcm",
                "priority": options.priority,
                "consistent_voice": False,  # each chunk is a task of its own: no first chunk to condition on
                "listen": True,  # played as it is made: its audio comes in pieces within each chunk
                # With a style, what the client said itself over the style's parameters (resolved by the submit).
                **({"style": options.style, **options.said} if options.style is not None else dict(options.sampling)),
            },
            strict=False,
        )
        tasks = self.host.service.tasks
        try:
            submitted = await self.host.ride_out(
                lambda: tasks.submit(body, self.host.caller, options.voice, first_chunk=index, stream=stream), "queue a chunk"
            )
        except InvalidInput as exc:
            await self.host.emit(Failure(self.id, "invalid_text", exc.message, details={"text": chunk[:200]}))
            await self._resolve(number)
            return
        except RateLimitExceeded as exc:
            raise ConnectionEnded("too_many_requests", f"{exc} (each chunk is one submit)") from None
        except QueueFullError as exc:
            raise ConnectionEnded("too_many_requests", str(exc)) from None
        segment = Segment(index, number, chunk, submitted.answer.task_id)
        self.segments.append(segment)
        await self.host.emit(SegmentQueued(self.id, index, chunk, segment.task_id))
        self._to_send.put_nowait(segment)

    def buffered_s(self) -> float:
        """Seconds of audio its listener still has to play now, sent but not yet played (negative: it ran dry that
        long ago; 0 before its first audio): a listener plays from the first audio sent, without pause."""
        if self.first_audio_at is None:
            return 0.0
        return self.samples / SAMPLE_RATE - (self.host.clock() - self.first_audio_at)

    async def _out(self, pcm: bytes) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = self.host.clock()
        offset = self.samples
        self.samples += len(pcm) // 2
        if audio := await self._converted(self.converter.feed, pcm):
            await self.host.emit(Audio(self.id, audio, offset))

    async def _converted(self, call: Callable[..., bytes], *args: bytes) -> bytes:
        """``call`` on the converter: in a worker thread where it costs real CPU (resampling, a codec: milliseconds a
        sentence, which many contexts would otherwise add to the event loop's every turn), else at once."""
        return await asyncio.to_thread(call, *args) if self.converter.encodes else call(*args)

    async def _send_audio(self) -> None:
        """Each queued chunk's audio in order, as its worker streams it, then its exact place in the context; once the
        last is sent, the context is over."""
        while (segment := await self._to_send.get()) is not None:
            await self.turn.wait()
            start = self.samples
            pieces = self.host.service.listening.pcm(segment.task_id)
            try:
                async for piece in pieces:
                    if self.over:  # cancelled, its cancellation lost beneath (below)
                        return
                    self.host.check_allowed()
                    if start == self.samples and start > 0:  # the pause between sentences, as a joined text has
                        await self._out(GAP)
                        start = self.samples
                    await self._out(piece)
                    if not segment.started:
                        segment.started = True
                        await self._pump()  # the next chunk, now that this one's audio is out
            except StreamFailed as exc:
                if self.over:
                    # Cancelled: the cancel abandoned this chunk's job, and a cancellation can be lost while the stream
                    # beneath reads the job's end (the sender then sees the job cancelled instead). Nothing more is said.
                    return
                segment.sent = True
                await self._pump()
                await self.host.emit(Failure(self.id, "synthesis_failed", str(exc), index=segment.index))
                await self._resolve(segment.number)
                continue
            finally:
                await _close(pieces)  # its subscription to the listener goes now, not when it is collected
            segment.sent = True
            await self._pump()  # a chunk that had no audio to start with
            self.host.touch()
            await self.host.emit(SegmentDone(self.id, segment.index, segment.text, segment.task_id, start, self.samples))
            await self._resolve(segment.number)
        if tail := await self._converted(self.converter.end):
            await self.host.emit(Audio(self.id, tail, self.samples))
        self.over = True
        try:
            await self.host.emit(ContextDone(self.id, False, len(self.segments), self.samples, self.chars))
        finally:
            self.host.context_over(self)

    async def abandon_unsent(self) -> None:
        """Give up this context's interest in every chunk whose audio was not all sent (a cancel, a dropped client, a
        timeout): a job nobody else joined is cancelled and its worker stops; one another context, session or request
        joined goes on for it (:meth:`TaskService.abandon`)."""
        unsent = [segment for segment in self.segments if not segment.sent]
        for segment in unsent:
            segment.sent = True
        await asyncio.gather(*(self._abandon(segment.task_id) for segment in unsent))

    async def _abandon(self, task_id: str) -> None:
        try:
            await self.host.ride_out(lambda: self.host.service.tasks.abandon(task_id, self.host.caller), "abandon a chunk")
        except (TaskNotFound, *STORE_ERRORS) as exc:  # best effort: the task still ends, its result unread
            log.warning("realtime session %s: could not abandon task %s: %s", self.host.id, task_id, exc)


async def _close(pieces: AsyncIterator[bytes]) -> None:
    """Close a chunk's audio iterator where it is a generator (a cancel or an error left it suspended)."""
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        await aclose()
