"""Realtime sessions: text in as it is written, audio out as it is made, over one WebSocket (``/v1/tts/realtime``).

A voice agent speaks an LLM's reply while the LLM is still writing it. The client opens a session with its voice,
seed and sampling options, then sends the text in pieces; each sentence is cut as it completes
(:class:`ttsq.domain.text_stream.TextStream`) and queued at once as a job of its own, through the same submit as every other
request (validation, pronunciation dictionary, rate limit, fair queue, cache, single-flight), so the API still runs
no inference and a worker that dies mid-sentence costs a retry, never the session. Chunk ``i`` of a session is
queued with ``first_chunk=i`` (:class:`ttsq.domain.jobs.TTSParams`): it draws the random stream chunk ``i`` of the
same text submitted whole would draw, so the session's audio equals that submit's wherever the cuts agree.

The audio goes back as binary frames of raw PCM16 (24 kHz, mono, little-endian) in text order, each chunk's as its
worker streams it, and JSON events around it: ``session.started``; ``segment.queued`` (a chunk became a task);
``segment.done`` (its audio is all sent, with its exact start and end in the session's audio, counted in samples);
``session.done``; ``error`` (a ``code`` and a sentence). Messages are JSON text frames, read as the HTTP routes read
a body (:func:`ttsq.api.bodies.read_json`: duplicate keys, ``NaN``, lone surrogates are refused):

* ``{"type": "session.start", "voice": ..., "seed": ..., "speed": ..., "idle_s": ..., "api_key": ...}`` first (a
  key may come in the handshake's ``Authorization``/``X-API-Key`` header instead: then it is checked before the
  WebSocket is accepted, and a refused one gets the HTTP answer, 401/403, instead of a session);
* ``{"type": "text", "text": "..."}`` any number of times;
* ``{"type": "flush"}``: speak what has arrived now, sentence or not;
* ``{"type": "keepalive"}``: nothing but that the client is there (a pause in the text, such as an agent's tool call);
* ``{"type": "close"}``: no more text; the rest is spoken, then ``session.done`` and close code 1000;
* ``{"type": "cancel"}``: stop now; the chunks not yet sent are abandoned, then ``session.done`` and 1000.

A malformed message is answered with an ``error`` event and the session goes on; what ends a session is a close
code (below) after an ``error`` event saying why. A dropped connection abandons every chunk not yet sent: as the OpenAI
route's client that goes away, a session gives up only its own interest in a job (:meth:`TaskService.abandon`), so a
job another session or request joined (single-flight) goes on for it.

What a client may cost is bounded whatever it sends: a message is at most ``REALTIME_MAX_MESSAGE_BYTES``; a connection
must send its ``session.start`` within ``REALTIME_START_S``, and nothing else is read before it; a session's messages
wait in an inbox of ``REALTIME_INBOX_MESSAGES``, and while it is full the socket is not read at all, so TCP holds the
client back (backpressure) instead of the API holding what it sent. A Redis outage while a session submits, abandons
or rechecks its key is a pause of up to ``LISTEN_OUTAGE_S`` (a restart, a failover, a Cluster slot move), not an end.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from asyncio import FIRST_COMPLETED as FIRST
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from redis.backoff import EqualJitterBackoff
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ttsq.api.auth import Authenticator, Principal, Unauthorized, presented_key
from ttsq.api.realtime_protocol import (
    CLOSE_CODES,
    REDIS_DOWN,
    Control,
    Disconnected,
    Inbox,
    RealtimeConfig,
    SessionEnded,
    SessionStart,
    TextPiece,
    close_with,
    decode_message,
    problem,
    receive_into,
    refuse,
)
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import InvalidInput, NoWorker, TaskNotFound, TTSService
from ttsq.api.stream_slots import TooManyStreams
from ttsq.domain.audio import SAMPLE_RATE, sentence_gap_pcm16
from ttsq.domain.text_stream import TextStream
from ttsq.domain.voices import OPENAI_VOICES, Voice, VoiceError
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.queue import QueueFullError
from ttsq.store.rate_limit import RateLimitExceeded
from ttsq.store.streams import StreamFailed

__all__ = ["CLOSE_CODES", "RealtimeConfig", "serve_session"]  # the protocol's words re-exported for the router and settings

log = logging.getLogger(__name__)
T = TypeVar("T")

GAP = sentence_gap_pcm16()
"""The pause before every chunk but the first (:data:`ttsq.domain.audio.SENTENCE_GAP_MS`)."""

OUTAGE_BACKOFF = EqualJitterBackoff(cap=1.0, base=0.05)
"""The pauses between a session's tries of a Redis call during an outage: doubling from 50 ms up to 1 s, each drawn
from its upper half, so the sessions of a process that all met one failover do not all come back in the same
instant."""


@dataclass
class _Segment:
    index: int
    text: str
    task_id: str
    started: bool = False
    """Its first audio has gone out."""
    sent: bool = False


def _quiet(task: asyncio.Task[Any]) -> None:
    """Mark what ``task`` raised as seen: the session surfaces it while it runs (:meth:`_Session._next`), and once the
    session is over nothing is left to tell (an ERROR "never retrieved" for a client that just left helps no one)."""
    if not task.cancelled():
        task.exception()


class _Session:
    def __init__(
        self,
        websocket: WebSocket,
        service: TTSService,
        caller: Principal,
        start: SessionStart,
        voice: Voice | None,
        config: RealtimeConfig,
        clock: Callable[[], float],
        still_valid: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.still_valid = still_valid
        """None for a keyless caller; else whether its key is still neither revoked nor expired."""
        self.ws = websocket
        self.service = service
        self.caller = caller
        self.start = start
        self.voice = voice
        self.config = config
        self.idle_s = start.idle_s or config.idle_s
        self.clock = clock
        self.id = uuid.uuid4().hex
        self.text = TextStream(config.max_chunk_chars)
        self.segments: list[_Segment] = []
        self.waiting: deque[str] = deque()
        """Chunks cut and not yet queued (:attr:`RealtimeConfig.ahead`)."""
        self.input_ended = False
        self.revoked = False
        """The key was found revoked or expired: nothing more is queued or sent."""
        self.pumping = asyncio.Lock()
        self.to_send: asyncio.Queue[_Segment | None] = asyncio.Queue()
        self.chars = 0
        self.samples = 0
        self.began = clock()
        self.active = self.began
        """When the client last sent something or was last sent audio: the idle timeout counts from here."""
        self.send_lock = asyncio.Lock()
        self.guards: set[asyncio.Task[None]] = set()
        """The tasks beside the reading (the audio sender, the key's watcher): one that fails ends the session."""
        self.sender: asyncio.Task[None] | None = None

    def _still_allowed(self) -> None:
        if self.revoked:
            raise SessionEnded("unauthorized", "the API key was revoked or has expired")

    async def _transmit(self, send: Awaitable[None]) -> None:
        """One frame out; a client that is gone is :class:`Disconnected`, whichever way the server says so."""
        try:
            await send
        except (WebSocketDisconnect, OSError):
            raise Disconnected from None
        except RuntimeError:  # Starlette: a send on a socket already closed (WebSocketDisconnected)
            if self.ws.application_state is WebSocketState.DISCONNECTED:
                raise Disconnected from None
            raise

    async def send(self, event: dict[str, Any]) -> None:
        self._still_allowed()
        async with self.send_lock:
            await self._transmit(self.ws.send_json(event))

    async def run(self, inbox: Inbox) -> None:
        """Serve the session until it is closed, cancelled or timed out (:class:`SessionEnded`)."""
        await self.send(
            {
                "type": "session.started",
                "session_id": self.id,
                "encoding": "pcm_s16le",
                "sample_rate": SAMPLE_RATE,
                "channels": 1,
                "idle_s": self.idle_s,
            }
        )
        self.sender = self._guard(self._send_audio())
        if self.still_valid is not None:
            self._guard(self._watch_key(self.still_valid))
        try:
            cancelled = await self._read(inbox)
            await self._finish(inbox, cancelled)
        finally:
            for task in self.guards:
                task.cancel()
            await self._abandon_unsent()

    def _guard(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        task.add_done_callback(_quiet)
        self.guards.add(task)
        return task

    async def _next(self, inbox: Inbox, timeout_s: float) -> dict[str, Any] | None:
        """The client's next message; None when ``timeout_s`` passes first, or the sender ends. What a guard raised (a
        revoked key, a failed submit, Redis gone for good) is raised here."""
        getting = asyncio.ensure_future(inbox.get())
        done, _ = await asyncio.wait({getting, *self.guards}, timeout=max(0.0, timeout_s), return_when=FIRST)
        if getting in done:
            return getting.result()
        getting.cancel()  # a message it was handed meanwhile stays in the inbox
        for task in done:
            task.result()
        return None

    async def _watch_key(self, still_valid: Callable[[], Awaitable[bool]]) -> None:
        """Ask every ``STREAM_KEY_RECHECK_S`` whether the session's key is still valid, for as long as it lasts (while
        text comes in and after ``close`` alike); once it is not, nothing more is queued or sent."""
        while True:
            await asyncio.sleep(self.config.key_recheck_s)
            if not await self._ride_out(still_valid, "recheck its key"):
                self.revoked = True
                self._still_allowed()

    async def _ride_out(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call()``, tried again through a Redis outage (a restart, a failover, a Cluster slot move) for up to
        ``LISTEN_OUTAGE_S`` from its first failure: the session pauses instead of ending; past it, the error is
        raised (the session ends with 1013)."""
        failing_since: float | None = None
        failures = 0
        while True:
            try:
                result = await call()
            except STORE_ERRORS as exc:
                now = self.clock()
                if failing_since is None:
                    failing_since = now
                    log.warning(
                        "realtime session %s could not %s: Redis unavailable (%s); trying again for up to %g s",
                        self.id,
                        what,
                        exc,
                        self.config.outage_s,
                    )
                left = failing_since + self.config.outage_s - now
                if left <= 0:
                    raise
                failures += 1
                await asyncio.sleep(min(left, OUTAGE_BACKOFF.compute(failures)))
            else:
                if failing_since is not None:
                    log.info("realtime session %s: Redis answers again; it could %s", self.id, what)
                return result

    async def _read(self, inbox: Inbox) -> bool:
        """Take messages until ``close`` (False) or ``cancel`` (True)."""
        clause_due: float | None = None
        while True:
            deadlines = [self.began + self.config.max_session_s, self._idle_due()]
            if clause_due is not None:
                deadlines.append(clause_due)
            message = await self._next(inbox, min(deadlines) - self.clock())
            if message is None:
                if self.sender is not None and self.sender.done():
                    raise RuntimeError("the audio sender ended before the input")
                now = self.clock()
                if now >= self.began + self.config.max_session_s:
                    raise self._timeout(self._too_long())
                if clause_due is not None and now >= clause_due:
                    clause_due = None
                    await self._queue(self.text.clauses())
                elif now >= self._idle_due():
                    raise self._timeout(
                        f"no message for {self.idle_s:g} s (the session's idle_s, at most REALTIME_IDLE_S): send "
                        "keepalive during a pause in the text, close when it ends"
                    )
                continue
            self.active = self.clock()
            kind = await self._handle(message)
            if kind in ("close", "cancel"):
                return kind == "cancel"
            if kind == "text":
                clause_due = self.clock() + self.config.clause_wait_s if self.text.has_speech else None
            elif kind == "flush":
                clause_due = None

    def _too_long(self) -> str:
        return f"a session lasts at most {self.config.max_session_s:g} s (REALTIME_MAX_S)"

    def _timeout(self, why: str) -> SessionEnded:
        """A timeout's ending, which says what of the text was never spoken (``unspoken``), so nothing is dropped
        without a word: the chunks not yet sent and the text not yet cut into one."""
        left = [segment.text for segment in self.segments if not segment.sent] + list(self.waiting)
        unspoken = " ".join([*left, self.text.pending.strip() if self.text.has_speech else ""]).strip()
        if not unspoken:
            return SessionEnded("timeout", why)
        return SessionEnded("timeout", f"{why}; {len(unspoken)} characters were not spoken (unspoken)", unspoken=unspoken)

    def _idle_due(self) -> float:
        pending = bool(self.waiting) or any(not segment.sent for segment in self.segments)
        return float("inf") if pending else self.active + self.idle_s

    async def _handle(self, message: dict[str, Any]) -> str | None:
        """One message; its type, or None for one refused with an ``error`` event."""
        if message.get("type") == "websocket.disconnect":
            raise Disconnected
        try:
            value = decode_message(message, self.config.max_message_bytes)
            kind = value["type"]
            if kind == "text":
                piece = TextPiece.model_validate(value).text
                if self.chars + len(piece) > self.config.max_chars:
                    raise SessionEnded(
                        "too_much_text", f"a session may send at most {self.config.max_chars} characters (REALTIME_MAX_CHARS)"
                    )
                self.chars += len(piece)
                await self._queue(self.text.feed(piece))
            elif kind in ("flush", "close", "cancel", "keepalive"):
                Control.model_validate(value)
                if kind == "flush":
                    await self._queue(self.text.flush())
                elif kind == "close":
                    await self._queue(self.text.close())
            elif kind == "session.start":
                raise ValueError("the session has started already")
            else:
                raise ValueError(f"unknown message type {kind[:40]!r}: send text, flush, keepalive, close or cancel")
        except ValidationError as exc:
            await self.send({"type": "error", "code": "invalid_message", "message": problem(exc)})
            return None
        except ValueError as exc:
            await self.send({"type": "error", "code": "invalid_message", "message": str(exc)})
            return None
        return str(kind)

    async def _queue(self, chunks: list[str]) -> None:
        """Take newly cut chunks; queue what :attr:`RealtimeConfig.ahead` allows now."""
        self.waiting.extend(chunks)
        await self._pump()

    async def _pump(self) -> None:
        """Queue waiting chunks, in order, while fewer than ``ahead`` queued ones have no audio out yet; once the
        input has ended and nothing waits, tell the sender that no more will come."""
        async with self.pumping:
            while self.waiting and sum(not s.started and not s.sent for s in self.segments) < self.config.ahead:
                self._still_allowed()
                await self._submit(self.waiting.popleft())
            if self.input_ended and not self.waiting:
                self.to_send.put_nowait(None)
                self.input_ended = False  # said once

    async def _submit(self, chunk: str) -> None:
        """Queue ``chunk`` as a task at its place in the session (``first_chunk``), through a Redis outage of up to
        ``LISTEN_OUTAGE_S``. A try whose answer was lost may have queued its job already: single-flight joins the
        next try to it (or, where single-flight is off, that job runs unheard)."""
        index = len(self.segments)
        body = SubmitRequest.model_validate(
            {
                "text": chunk,
                "voice": self.voice.name if self.voice is not None else None,
                "seed": self.start.seed,
                "format": "pcm",
                "priority": self.start.priority,
                "consistent_voice": False,  # each chunk is a task of its own: no first chunk to condition on
                "style": self.start.style,
                **self.start.said(),  # what the start message says itself: its style's parameters stand for the rest
            },
            strict=False,
        )
        try:
            submitted = await self._ride_out(
                lambda: self.service.tasks.submit(body, self.caller, self.voice, first_chunk=index), "queue a chunk"
            )
        except InvalidInput as exc:
            await self.send({"type": "error", "code": "invalid_text", "message": exc.message, "text": chunk[:200]})
            return
        except RateLimitExceeded as exc:
            raise SessionEnded("too_many_requests", f"{exc} (each chunk is one submit)") from None
        except QueueFullError as exc:
            raise SessionEnded("too_many_requests", str(exc)) from None
        segment = _Segment(index, chunk, submitted.answer.task_id)
        self.segments.append(segment)
        await self.send({"type": "segment.queued", "index": index, "text": chunk, "task_id": segment.task_id})
        self.to_send.put_nowait(segment)

    async def _send_audio(self) -> None:
        """Each queued chunk's audio in order, as its worker streams it, then its exact place in the session."""
        while (segment := await self.to_send.get()) is not None:
            start = self.samples
            try:
                async for piece in self.service.listening.pcm(segment.task_id):
                    self._still_allowed()
                    async with self.send_lock:
                        if start == self.samples and start > 0:  # the pause between sentences, as a joined text has
                            await self._transmit(self.ws.send_bytes(GAP))
                            self.samples += len(GAP) // 2
                            start = self.samples
                        await self._transmit(self.ws.send_bytes(piece))
                    self.samples += len(piece) // 2
                    if not segment.started:
                        segment.started = True
                        await self._pump()  # the next chunk, now that this one's audio is out
            except StreamFailed as exc:
                segment.sent = True
                await self._pump()
                await self.send({"type": "error", "code": "synthesis_failed", "index": segment.index, "message": str(exc)})
                continue
            segment.sent = True
            await self._pump()  # a chunk that had no audio to start with
            self.active = self.clock()
            await self.send(
                {
                    "type": "segment.done",
                    "index": segment.index,
                    "text": segment.text,
                    "task_id": segment.task_id,
                    "start_s": start / SAMPLE_RATE,
                    "end_s": self.samples / SAMPLE_RATE,
                }
            )

    async def _finish(self, inbox: Inbox, cancelled: bool) -> None:
        """After ``close``: the rest of the audio (messages meanwhile are told the session is closing); after
        ``cancel``: nothing more. Then ``session.done``."""
        assert self.sender is not None
        if cancelled:
            self.waiting.clear()
            self.sender.cancel()
            await self._abandon_unsent()
        else:
            self.input_ended = True
            await self._pump()
            while not self.sender.done():
                message = await self._next(inbox, self.began + self.config.max_session_s - self.clock())
                if message is not None:
                    if message.get("type") == "websocket.disconnect":
                        raise Disconnected
                    await self.send({"type": "error", "code": "closing", "message": "the session is closing: no more messages"})
                elif not self.sender.done():
                    raise self._timeout(self._too_long())
            self.sender.result()
        await self.send(
            {
                "type": "session.done",
                "session_id": self.id,
                "cancelled": cancelled,
                "segments": len(self.segments),
                "audio_s": self.samples / SAMPLE_RATE,
                "chars": self.chars,
            }
        )

    async def _abandon_unsent(self) -> None:
        """Give up the session's interest in every chunk whose audio was not all sent (a dropped client, a cancel, a
        timeout): a job nobody else joined is cancelled and its worker stops; one another session or request joined
        goes on for it (:meth:`TaskService.abandon`)."""
        unsent = [segment for segment in self.segments if not segment.sent]
        for segment in unsent:
            segment.sent = True
        await asyncio.gather(*(self._abandon(segment.task_id) for segment in unsent))

    async def _abandon(self, task_id: str) -> None:
        try:
            await self._ride_out(lambda: self.service.tasks.abandon(task_id, self.caller), "abandon a chunk")
        except (TaskNotFound, *STORE_ERRORS) as exc:  # best effort: the task still ends, its result unread
            log.warning("realtime session %s: could not abandon task %s: %s", self.id, task_id, exc)


async def _voice(service: TTSService, name: str | None, caller: Principal) -> Voice | None:
    """The session's voice among those ``caller`` sees (its tenant's and the global ones); OpenAI's names too."""
    if name is None:
        return None
    return await service.voicing.resolve_voice(OPENAI_VOICES.get(name, name), caller)


async def _handshake_caller(websocket: WebSocket, authenticator: Authenticator, retry_after_s: int) -> Principal | bool:
    """The caller of a key in the handshake's headers, checked before anything else: False when it was refused (and
    the handshake answered), True when the handshake carried no key (the ``session.start`` may bring one)."""
    headers = websocket.headers
    presented = presented_key(headers.get("authorization"), headers.get("x-api-key"))
    if presented is None:
        return True
    try:
        caller = await authenticator.principal(presented, websocket.client.host if websocket.client else "unknown")
    except Unauthorized as exc:
        await refuse(websocket, 401, str(exc), retry_after_s)
        return False
    except STORE_ERRORS as exc:
        log.warning("realtime handshake: Redis unavailable: %s", exc)
        await refuse(websocket, 503, REDIS_DOWN, retry_after_s)
        return False
    if not caller.allows("tts"):
        await refuse(websocket, 403, "this API key lacks the 'tts' scope needed here", retry_after_s)
        return False
    return caller


async def serve_session(
    websocket: WebSocket,
    service: TTSService,
    authenticator: Authenticator,
    config: RealtimeConfig,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Serve one realtime session on an accepted-to-be ``websocket``, from its handshake to its close."""
    handshake = await _handshake_caller(websocket, authenticator, config.retry_after_s)
    if handshake is False:
        return
    inbox: Inbox = asyncio.Queue(maxsize=config.inbox_messages)
    receiver: asyncio.Task[None] | None = None
    release: Callable[[], None] | None = None
    session: _Session | None = None
    try:
        await websocket.accept()
        try:  # the first message alone, read here: nothing more is read before the caller is known
            first = dict(await asyncio.wait_for(websocket.receive(), config.start_s))
        except TimeoutError:
            raise SessionEnded("timeout", f"no session.start within {config.start_s:g} s (REALTIME_START_S)") from None
        if first["type"] == "websocket.disconnect":
            raise Disconnected
        try:
            start = SessionStart.model_validate(decode_message(first, config.max_message_bytes))
        except ValidationError as exc:
            raise SessionEnded("invalid_session", f"the first message must be a valid session.start: {problem(exc)}") from None
        except ValueError as exc:
            raise SessionEnded("invalid_session", f"the first message must be a session.start: {exc}") from None
        if start.idle_s is not None and start.idle_s > config.idle_s:
            raise SessionEnded("invalid_session", f"idle_s: at most {config.idle_s:g} s here (REALTIME_IDLE_S)")
        if isinstance(handshake, Principal) and start.api_key is None:
            caller = handshake
        else:
            try:
                caller = await authenticator.principal(start.api_key, websocket.client.host if websocket.client else "unknown")
            except Unauthorized as exc:
                raise SessionEnded("unauthorized", str(exc)) from None
            if not caller.allows("tts"):
                raise SessionEnded("forbidden", "this API key lacks the 'tts' scope needed here")
        try:
            release = service.listening.stream_slots.take(caller.subject, caller.tenant)
        except TooManyStreams as exc:
            raise SessionEnded("too_many_requests" if exc.per_key else "unavailable", str(exc)) from None
        try:
            voice = await _voice(service, start.voice, caller)
        except InvalidInput as exc:
            raise SessionEnded("invalid_session", f"{exc.field}: {exc.message}") from None
        except VoiceError as exc:
            raise SessionEnded("invalid_session", str(exc)) from None
        key = caller.key
        still_valid = (lambda: authenticator.store.still_valid(key)) if key is not None else None
        session = _Session(websocket, service, caller, start, voice, config, clock, still_valid)
        log.info("realtime session %s opened by %s", session.id, caller.subject)
        receiver = asyncio.create_task(receive_into(websocket, inbox))
        receiver.add_done_callback(_quiet)
        await session.run(inbox)
        await close_with(websocket, "done")
    except SessionEnded as exc:
        await close_with(websocket, exc.code, str(exc), exc.details)
    except (Disconnected, WebSocketDisconnect):
        pass
    except OSError:  # the client went away before the handshake's answer could be sent
        pass
    except NoWorker as exc:
        await close_with(websocket, NoWorker.code, str(exc))
    except STORE_ERRORS as exc:
        log.warning("realtime session: Redis unavailable: %s", exc)
        await close_with(websocket, "unavailable", REDIS_DOWN)
    except Exception:
        log.exception("realtime session failed")
        await close_with(websocket, "internal_error", "internal error")
    finally:
        if receiver is not None:
            receiver.cancel()
        if release is not None:
            release()
        if session is not None:
            audio_s = session.samples / SAMPLE_RATE
            log.info("realtime session %s ended: %d chunks, %.2f s of audio", session.id, len(session.segments), audio_s)
