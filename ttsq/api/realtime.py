"""Realtime sessions: text in as it is written, audio out as it is made, over one WebSocket (``/v1/tts/realtime``).

A voice agent speaks an LLM's reply while the LLM is still writing it. The client opens a session with its voice,
seed and sampling options, then sends the text in pieces; each sentence is cut as it completes
(:class:`ttsq.domain.text.TextStream`) and queued at once as a job of its own, through the same submit as every other
request (validation, pronunciation dictionary, rate limit, fair queue, cache, single-flight), so the API still runs
no inference and a worker that dies mid-sentence costs a retry, never the session. Chunk ``i`` of a session is
queued with ``first_chunk=i`` (:class:`ttsq.domain.jobs.TTSParams`): it draws the random stream chunk ``i`` of the
same text submitted whole would draw, so the session's audio equals that submit's wherever the cuts agree.

The audio goes back as binary frames of raw PCM16 (24 kHz, mono, little-endian) in text order, each chunk's as its
worker streams it, and JSON events around it: ``session.started``; ``segment.queued`` (a chunk became a task);
``segment.done`` (its audio is all sent, with its exact start and end in the session's audio, counted in samples);
``session.done``; ``error`` (a ``code`` and a sentence). Messages are JSON text frames:

* ``{"type": "session.start", "voice": ..., "seed": ..., "speed": ..., "api_key": ...}`` first (a key may come in
  the handshake's ``Authorization``/``X-API-Key`` header instead);
* ``{"type": "text", "text": "..."}`` any number of times;
* ``{"type": "flush"}``: speak what has arrived now, sentence or not;
* ``{"type": "close"}``: no more text; the rest is spoken, then ``session.done`` and close code 1000;
* ``{"type": "cancel"}``: stop now; queued chunks are cancelled, then ``session.done`` and 1000.

A malformed message is answered with an ``error`` event and the session goes on; what ends a session is a close
code (below) after an ``error`` event saying why. A dropped connection cancels every chunk not yet sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from asyncio import FIRST_COMPLETED as FIRST
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ttsq.api.auth import Authenticator, Principal, Unauthorized, presented_key
from ttsq.api.schemas import REQUEST_MODEL, SubmitRequest
from ttsq.api.service import InvalidInput, NoWorker, TaskNotFound, TTSService
from ttsq.api.stream_slots import TooManyStreams
from ttsq.domain.audio import SAMPLE_RATE, sentence_gap_pcm16
from ttsq.domain.jobs import MAX_SEED, Priority
from ttsq.domain.sampling import SamplingFields
from ttsq.domain.text import TextStream
from ttsq.domain.voices import OPENAI_VOICES, Voice, VoiceError
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.queue import QueueFullError
from ttsq.store.rate_limit import RateLimitExceeded
from ttsq.store.streams import StreamFailed

__all__ = ["CLOSE_CODES", "RealtimeConfig", "serve_session"]

log = logging.getLogger(__name__)

CLOSE_CODES: dict[str, int] = {
    "done": 1000,
    "message_too_big": 1009,
    "internal_error": 1011,
    "unavailable": 1013,  # "try again later": Redis unreachable, or this process serves its limit of streams
    "no_worker": 1013,  # no worker is alive to speak the session's text (NO_WORKER_S)
    "invalid_session": 4400,
    "unauthorized": 4401,
    "forbidden": 4403,
    "timeout": 4408,
    "too_much_text": 4413,
    "too_many_requests": 4429,
}
"""How a session ends. 1000 is a finished session; 4xxx mirror the HTTP status a request would get."""


GAP = sentence_gap_pcm16()
"""The pause before every chunk but the first (:data:`ttsq.domain.audio.SENTENCE_GAP_MS`)."""


@dataclass(frozen=True)
class RealtimeConfig:
    """The session limits (``REALTIME_*``) and the chunk size the workers use (``MAX_CHUNK_CHARS``). Built by app.py."""

    max_chunk_chars: int
    idle_s: float
    """How long a session may go without a message from the client while none of its audio is pending."""
    max_session_s: float
    """The longest a session may last, however busy."""
    max_chars: int
    """The most text one session may send."""
    clause_wait_s: float
    """How long text without a sentence end waits before it is spoken up to its last clause mark."""
    max_message_bytes: int
    """The largest message; a larger one ends the session with 1009."""
    key_recheck_s: float
    """How often a session opened with a key asks whether it is still valid (``STREAM_KEY_RECHECK_S``): one revoked or
    expired meanwhile ends the session (4401)."""
    ahead: int
    """Chunks a session keeps queued beyond the one whose audio is streaming (``REALTIME_AHEAD``): the next is
    queued when a chunk's first audio goes out, so a session's later sentences do not share decode steps with its
    first one while a listener waits for it (on a CPU each row added to a step slows the step)."""


class SessionStart(SamplingFields):
    """The first message: who calls and how the session speaks (the sampling fields as on ``/v1/tts/submit``)."""

    model_config = REQUEST_MODEL

    type: Literal["session.start"]
    voice: str | None = Field(None, max_length=512, description="A voice name, OpenAI voice name or blend.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed; without a voice it picks the speaker.")
    priority: Priority | None = None
    api_key: str | None = Field(None, max_length=512, description="The key, where the handshake carried none.")


class TextPiece(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["text"]
    text: str


class Control(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["flush", "close", "cancel"]


class SessionEnded(Exception):
    """Ends the session: an ``error`` event (``code``, ``message``), then the close code of ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Segment:
    index: int
    text: str
    task_id: str
    started: bool = False
    """Its first audio has gone out."""
    sent: bool = False


@dataclass
class _Inbox:
    """The client's messages, read by one task of their own (a receive is never cancelled half-way)."""

    messages: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "message"
    return f"{where}: {first['msg']}"


def _decode(message: dict[str, Any], limit: int) -> dict[str, Any]:
    """A client frame as a JSON object, or :class:`ValueError` saying what is wrong with it (a frame too large:
    :class:`SessionEnded`)."""
    if message.get("bytes") is not None:
        if len(message["bytes"]) > limit:
            raise SessionEnded("message_too_big", f"a message is at most {limit} bytes (REALTIME_MAX_MESSAGE_BYTES)")
        raise ValueError("binary frames are not accepted: send JSON messages as text frames")
    text = message.get("text") or ""
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise SessionEnded("message_too_big", f"a message is at most {limit} bytes (REALTIME_MAX_MESSAGE_BYTES)")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {str(exc)[:200] if isinstance(exc, ValueError) else 'nested too deeply'}") from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError('a message is a JSON object with a "type": session.start, text, flush, close or cancel')
    return value


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
        self.clock = clock
        self.id = uuid.uuid4().hex
        self.text = TextStream(config.max_chunk_chars)
        self.segments: list[_Segment] = []
        self.waiting: deque[str] = deque()
        """Chunks cut and not yet queued (:attr:`RealtimeConfig.ahead`)."""
        self.input_ended = False
        self.pumping = asyncio.Lock()
        self.to_send: asyncio.Queue[_Segment | None] = asyncio.Queue()
        self.chars = 0
        self.samples = 0
        self.began = clock()
        self.active = self.began
        """When the client last sent something or was last sent audio: the idle timeout counts from here."""
        self.send_lock = asyncio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_json(event)

    async def run(self, inbox: _Inbox) -> None:
        """Serve the session until it is closed, cancelled or timed out (:class:`SessionEnded`)."""
        await self.send(
            {
                "type": "session.started",
                "session_id": self.id,
                "encoding": "pcm_s16le",
                "sample_rate": SAMPLE_RATE,
                "channels": 1,
            }
        )
        sender = asyncio.create_task(self._send_audio())
        try:
            cancelled = await self._read(inbox, sender)
            await self._finish(inbox, sender, cancelled)
        finally:
            if not sender.done():
                sender.cancel()
            await self._cancel_unsent()

    async def _read(self, inbox: _Inbox, sender: asyncio.Task[None]) -> bool:
        """Take messages until ``close`` (False) or ``cancel`` (True)."""
        clause_due: float | None = None
        key_due = self.clock() + self.config.key_recheck_s
        while True:
            now = self.clock()
            if self.still_valid is not None and now >= key_due:
                key_due = now + self.config.key_recheck_s
                if not await self.still_valid():
                    raise SessionEnded("unauthorized", "the API key was revoked or has expired")
            deadlines = [self.began + self.config.max_session_s, self._idle_due()]
            if self.still_valid is not None:
                deadlines.append(key_due)
            if clause_due is not None:
                deadlines.append(clause_due)
            getting = asyncio.ensure_future(inbox.messages.get())
            done, _ = await asyncio.wait({getting, sender}, timeout=max(0.0, min(deadlines) - now), return_when=FIRST)
            if sender in done:  # the audio side failed (a refused submit, Redis): raise it here
                getting.cancel()
                sender.result()
                raise RuntimeError("the audio sender ended before the input")
            if getting not in done:
                getting.cancel()
                now = self.clock()
                if now >= self.began + self.config.max_session_s:
                    raise SessionEnded("timeout", self._too_long()) from None
                if clause_due is not None and now >= clause_due:
                    clause_due = None
                    await self._queue(self.text.clauses())
                elif now >= self._idle_due():
                    raise SessionEnded(
                        "timeout", f"no message for {self.config.idle_s:g} s (REALTIME_IDLE_S); send close when the text ends"
                    ) from None
                continue
            message = getting.result()
            self.active = self.clock()
            kind = await self._handle(message)
            if kind in ("close", "cancel"):
                return kind == "cancel"
            if kind == "text":
                clause_due = self.clock() + self.config.clause_wait_s if self.text.pending.strip() else None
            elif kind == "flush":
                clause_due = None

    def _too_long(self) -> str:
        return f"a session lasts at most {self.config.max_session_s:g} s (REALTIME_MAX_S)"

    def _idle_due(self) -> float:
        pending = bool(self.waiting) or any(not segment.sent for segment in self.segments)
        return float("inf") if pending else self.active + self.config.idle_s

    async def _handle(self, message: dict[str, Any]) -> str | None:
        """One message; its type, or None for one refused with an ``error`` event."""
        if message.get("type") == "websocket.disconnect":
            raise _Disconnected
        try:
            value = _decode(message, self.config.max_message_bytes)
            kind = value["type"]
            if kind == "text":
                piece = TextPiece.model_validate(value).text
                if self.chars + len(piece) > self.config.max_chars:
                    raise SessionEnded(
                        "too_much_text", f"a session may send at most {self.config.max_chars} characters (REALTIME_MAX_CHARS)"
                    )
                self.chars += len(piece)
                await self._queue(self.text.feed(piece))
            elif kind in ("flush", "close", "cancel"):
                Control.model_validate(value)
                if kind in ("flush", "close"):
                    await self._queue(self.text.flush())
            elif kind == "session.start":
                raise ValueError("the session has started already")
            else:
                raise ValueError(f"unknown message type {kind[:40]!r}: send text, flush, close or cancel")
        except ValidationError as exc:
            await self.send({"type": "error", "code": "invalid_message", "message": _problem(exc)})
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
                await self._submit(self.waiting.popleft())
            if self.input_ended and not self.waiting:
                self.to_send.put_nowait(None)
                self.input_ended = False  # said once

    async def _submit(self, chunk: str) -> None:
        """Queue ``chunk`` as a task at its place in the session (``first_chunk``)."""
        index = len(self.segments)
        body = SubmitRequest.model_validate(
            {
                "text": chunk,
                "voice": self.voice.name if self.voice is not None else None,
                "seed": self.start.seed,
                "format": "pcm",
                "priority": self.start.priority,
                "consistent_voice": False,  # each chunk is a task of its own: no first chunk to condition on
                **dict(self.start.sampling),
            },
            strict=False,
        )
        try:
            submitted = await self.service.tasks.submit(body, self.caller, self.voice, first_chunk=index)
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
                    async with self.send_lock:
                        if start == self.samples and start > 0:  # the pause between sentences, as a joined text has
                            await self.ws.send_bytes(GAP)
                            self.samples += len(GAP) // 2
                            start = self.samples
                        await self.ws.send_bytes(piece)
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

    async def _finish(self, inbox: _Inbox, sender: asyncio.Task[None], cancelled: bool) -> None:
        """After ``close``: the rest of the audio (messages meanwhile are told the session is closing); after
        ``cancel``: nothing more. Then ``session.done``."""
        if cancelled:
            self.waiting.clear()
            sender.cancel()
            await self._cancel_unsent()
        else:
            self.input_ended = True
            await self._pump()
            while not sender.done():
                getting = asyncio.ensure_future(inbox.messages.get())
                left = max(0.0, self.began + self.config.max_session_s - self.clock())
                done, _ = await asyncio.wait({sender, getting}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if getting in done:
                    message = getting.result()
                    if message.get("type") == "websocket.disconnect":
                        raise _Disconnected
                    await self.send({"type": "error", "code": "closing", "message": "the session is closing: no more messages"})
                else:
                    getting.cancel()
                if not done:
                    raise SessionEnded("timeout", self._too_long())
            sender.result()
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

    async def _cancel_unsent(self) -> None:
        """Cancel every chunk whose audio was not all sent (a dropped client, a cancel, a timeout): its worker stops."""
        for segment in self.segments:
            if not segment.sent:
                segment.sent = True
                try:
                    await self.service.tasks.cancel(segment.task_id, self.caller)
                except (TaskNotFound, *STORE_ERRORS) as exc:  # best effort: the task still ends, its result unread
                    log.warning("realtime session %s: could not cancel task %s: %s", self.id, segment.task_id, exc)


class _Disconnected(Exception):
    """The client went away."""


async def _receive_into(websocket: WebSocket, inbox: _Inbox) -> None:
    while True:
        message = dict(await websocket.receive())
        inbox.messages.put_nowait(message)
        if message["type"] == "websocket.disconnect":
            return


async def _voice(service: TTSService, name: str | None, caller: Principal) -> Voice | None:
    """The session's voice among those ``caller`` sees (its tenant's and the global ones); OpenAI's names too."""
    if name is None:
        return None
    return await service.voicing.resolve_voice(OPENAI_VOICES.get(name, name), caller)


async def _close(websocket: WebSocket, code: str, message: str | None = None) -> None:
    if websocket.application_state is not WebSocketState.CONNECTED or websocket.client_state is not WebSocketState.CONNECTED:
        return
    try:
        if message is not None:
            await websocket.send_json({"type": "error", "code": code, "message": message})
        await websocket.close(CLOSE_CODES.get(code, 1011), reason=(message or "")[:120])
    except (RuntimeError, OSError, WebSocketDisconnect):  # the client is gone already
        return


async def serve_session(
    websocket: WebSocket,
    service: TTSService,
    authenticator: Authenticator,
    config: RealtimeConfig,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Serve one realtime session on an accepted-to-be ``websocket``, from its first message to its close."""
    await websocket.accept()
    inbox = _Inbox()
    receiver = asyncio.create_task(_receive_into(websocket, inbox))
    release: Callable[[], None] | None = None
    session: _Session | None = None
    try:
        try:
            first = await asyncio.wait_for(inbox.messages.get(), config.idle_s)
        except TimeoutError:
            raise SessionEnded("timeout", f"no session.start within {config.idle_s:g} s (REALTIME_IDLE_S)") from None
        if first["type"] == "websocket.disconnect":
            raise _Disconnected
        try:
            start = SessionStart.model_validate(_decode(first, config.max_message_bytes))
        except ValidationError as exc:
            raise SessionEnded("invalid_session", f"the first message must be a valid session.start: {_problem(exc)}") from None
        except ValueError as exc:
            raise SessionEnded("invalid_session", f"the first message must be a session.start: {exc}") from None
        headers = websocket.headers
        presented = start.api_key or presented_key(headers.get("authorization"), headers.get("x-api-key"))
        try:
            caller = await authenticator.principal(presented, websocket.client.host if websocket.client else "unknown")
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
        await session.run(inbox)
        await _close(websocket, "done")
    except SessionEnded as exc:
        await _close(websocket, exc.code, str(exc))
    except _Disconnected:
        pass
    except NoWorker as exc:
        await _close(websocket, NoWorker.code, str(exc))
    except STORE_ERRORS as exc:
        log.warning("realtime session: Redis unavailable: %s", exc)
        await _close(websocket, "unavailable", "the job store (Redis) is unreachable; please retry shortly")
    except Exception:
        log.exception("realtime session failed")
        await _close(websocket, "internal_error", "internal error")
    finally:
        receiver.cancel()
        if release is not None:
            release()
        if session is not None:
            audio_s = session.samples / SAMPLE_RATE
            log.info("realtime session %s ended: %d chunks, %.2f s of audio", session.id, len(session.segments), audio_s)
