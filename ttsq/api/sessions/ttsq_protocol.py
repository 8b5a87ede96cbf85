"""ttsq's own realtime protocol (``/v1/tts/realtime``, docs/realtime.md) as an adapter on the session engine: its
messages, its events, its close codes.

A client opens a session with ``session.start`` (its voice, seed and sampling options, its key where the handshake
carried none) and sends text in pieces; each sentence is spoken as it completes. Messages are JSON text frames, read as
the HTTP routes read a body (duplicate keys, ``NaN``, lone surrogates are refused):

* ``{"type": "session.start", "voice": ..., "seed": ..., "speed": ..., "idle_s": ..., "audio_transport": ...,
  "output_format": ..., "sample_rate": ..., "api_key": ...}`` first (a key may come in the handshake's
  ``Authorization``/``X-API-Key`` header instead: then it is checked before the WebSocket is accepted, and a refused
  one gets the HTTP answer, 401/403, instead of a session);
* ``{"type": "text", "text": "..."}`` any number of times;
* ``{"type": "flush"}``: speak what has arrived now, sentence or not (with a ``"mark"``: ``flush.done`` with that mark
  once every chunk cut so far is spoken, refused or failed);
* ``{"type": "keepalive"}``: nothing but that the client is there (a pause in the text, such as an agent's tool call);
* ``{"type": "close"}``: no more text; the rest is spoken, then ``session.done`` and close code 1000;
* ``{"type": "cancel"}``: stop now; the chunks not yet sent are abandoned, then ``session.done`` and 1000;
* ``{"type": "context.start", "context_id": ..., <session.start's voice, seed, sampling, priority>}``: another context
  on the session; ``text``, ``flush``, ``keepalive``, ``close`` and ``cancel`` with its ``context_id`` act on it alone
  (``close``/``cancel`` then end that context only, with ``context.done``). A message without one is the default
  context's, and a session used only that way is the single-context session it always was, event for event.

Events: ``session.started``; ``context.started`` and ``context.done`` (named contexts); ``segment.queued`` (a chunk
became a task); ``segment.done`` (its audio is all sent, with its exact start and end in its context's audio);
``flush.done``; ``session.done``; ``error`` (a ``code`` and a sentence); each with the ``context_id`` of a named context. Audio is
binary frames of raw PCM16 (24 kHz, mono, little-endian; or the session's ``output_format``, each context's audio
one stream in it) — one context's at a time, in the order the contexts were
opened, since a binary frame cannot say whose it is — or, with ``"audio_transport": "json"``, ``audio`` events with
the audio in base64 (each with its ``context_id``, every context's as it comes), for clients that read only text frames.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ttsq.api.schemas import REQUEST_MODEL
from ttsq.api.sessions.connection import Connection
from ttsq.api.sessions.engine import Opening
from ttsq.api.sessions.events import (
    PCM16,
    Audio,
    ConnectionDone,
    ContextDone,
    ContextId,
    ContextOptions,
    ContextStarted,
    Ended,
    Event,
    Failure,
    Flushed,
    Opened,
    RealtimeConfig,
    SegmentDone,
    SegmentQueued,
)
from ttsq.api.sessions.wire import ConnectionEnded, Frame, problem, read_frame
from ttsq.domain.jobs import MAX_SEED, Priority
from ttsq.domain.output_formats import TTSQ_NAMES, TtsqName, UnsupportedFormat, parse_ttsq
from ttsq.domain.sampling import SAMPLING_FIELDS, SamplingFields

__all__ = ["CLOSE_CODES", "ContextStart", "SessionStart", "TtsqProtocol"]

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

MESSAGE_TYPES = "session.start, context.start, text, flush, keepalive, close or cancel"

ContextIdField = Field(None, min_length=1, max_length=128, description="A named context's id (none: the default context).")


class ContextFields(SamplingFields):
    """How a context speaks: the sampling fields as on ``/v1/tts/submit``, a voice, a seed, a priority."""

    model_config = REQUEST_MODEL

    voice: str | None = Field(None, max_length=512, description="A voice name, OpenAI voice name or blend.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed; without a voice it picks the speaker.")
    priority: Priority | None = None


class SessionStart(ContextFields):
    """The first message: who calls and how the session speaks (its default context, and any context that names
    nothing else)."""

    type: Literal["session.start"]
    idle_s: float | None = Field(
        None, gt=0, description="This session's idle timeout, in seconds: at most the server's (REALTIME_IDLE_S)."
    )
    audio_transport: Literal["binary", "json"] = Field(
        "binary", description="Audio as binary frames, or as base64 in JSON `audio` events (for text-only clients)."
    )
    output_format: TtsqName = Field(
        "pcm", description=f"The audio's format, as on the HTTP routes: {', '.join(TTSQ_NAMES)} (each context's one stream)."
    )
    sample_rate: int | None = Field(None, description="Its sample rate (default: 24000; mulaw and alaw: 8000).")
    api_key: str | None = Field(None, max_length=512, description="The key, where the handshake carried none.")


class ContextStart(ContextFields):
    """A named context: what it leaves out, it takes from ``session.start``."""

    type: Literal["context.start"]
    context_id: str = Field(min_length=1, max_length=128)


class TextPiece(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["text"]
    text: str
    context_id: str | None = ContextIdField


class Control(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["flush", "close", "cancel", "keepalive"]
    context_id: str | None = ContextIdField
    mark: str | None = Field(
        None, min_length=1, max_length=128, description="A flush's name: `flush.done` says it once all it cut is spoken."
    )


def decode(message: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """A client frame as a JSON object with a ``type``, or :class:`ValueError` saying what is wrong with it."""
    value = read_frame(dict(message), limit)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError(f'a message is a JSON object with a "type": {MESSAGE_TYPES}')
    return value


def _json(event: dict[str, Any]) -> str:
    """As Starlette's ``send_json`` writes it (the bytes this protocol always sent)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


class TtsqProtocol:
    """One ttsq session's adapter (:class:`.engine.Adapter`)."""

    def __init__(self, config: RealtimeConfig) -> None:
        self.config = config
        self.start: SessionStart | None = None
        self.output = PCM16
        """The session's output format (every context's)."""

    async def open(self, opening: Opening) -> Connection:
        config = self.config
        handshake = await opening.caller_before_accept(opening.handshake_key())
        await opening.accept()
        first = await opening.first_message(config.start_s, f"no session.start within {config.start_s:g} s (REALTIME_START_S)")
        try:
            start = self.start = SessionStart.model_validate(decode(first, config.max_message_bytes))
        except ValidationError as exc:
            raise ConnectionEnded("invalid_session", f"the first message must be a valid session.start: {problem(exc)}") from None
        except ValueError as exc:
            raise ConnectionEnded("invalid_session", f"the first message must be a session.start: {exc}") from None
        if start.idle_s is not None and start.idle_s > config.idle_s:
            raise ConnectionEnded("invalid_session", f"idle_s: at most {config.idle_s:g} s here (REALTIME_IDLE_S)")
        try:
            self.output = parse_ttsq(start.output_format, start.sample_rate)
        except UnsupportedFormat as exc:
            raise ConnectionEnded("invalid_session", f"output_format: {exc}") from None
        caller = handshake if handshake is not None and start.api_key is None else await opening.authenticate(start.api_key)
        connection = opening.connect(caller, self, idle_s=start.idle_s, ordered=start.audio_transport == "binary")
        try:
            voice = await opening.voice(start.voice, caller)
        except ValueError as exc:
            raise ConnectionEnded("invalid_session", str(exc)) from None
        connection.defaults = ContextOptions(voice, start.seed, start.priority, start.sampling, self.output)
        return connection

    async def handle(self, connection: Connection, message: Mapping[str, Any]) -> None:
        try:
            value = decode(message, self.config.max_message_bytes)
            kind = value["type"]
            if kind == "text":
                piece = TextPiece.model_validate(value)
                await connection.add_text(piece.context_id, piece.text)
            elif kind in ("flush", "close", "cancel", "keepalive"):
                await self._control(connection, Control.model_validate(value))
            elif kind == "context.start":
                await self._start_context(connection, ContextStart.model_validate(value))
            elif kind == "session.start":
                raise ValueError("the session has started already")
            else:
                raise ValueError(f"unknown message type {kind[:40]!r}: send {MESSAGE_TYPES.removeprefix('session.start, ')}")
        except ValidationError as exc:
            await connection.refuse("invalid_message", problem(exc))
        except ValueError as exc:
            await connection.refuse("invalid_message", str(exc))

    @staticmethod
    async def _control(connection: Connection, control: Control) -> None:
        named = control.context_id
        if control.mark is not None and control.type != "flush":
            raise ValueError("mark: only a flush takes one")
        if control.type == "flush":
            await connection.flush(named, control.mark)
        elif control.type == "keepalive":
            connection.keep_alive()
        elif named is not None:
            await (connection.close_context(named) if control.type == "close" else connection.cancel_context(named))
        else:
            await (connection.close() if control.type == "close" else connection.cancel())

    async def _start_context(self, connection: Connection, start: ContextStart) -> None:
        """A named context with its own options: those it leaves out are the session's."""
        assert self.start is not None and connection.defaults is not None
        given = start.model_fields_set
        voice = connection.defaults.voice
        if "voice" in given:
            try:
                voice = await connection.voice(start.voice)
            except ValueError as exc:
                await connection.refuse("invalid_context", str(exc), start.context_id)
                return
        chosen = {name: getattr(start if name in given else self.start, name) for name in ("seed", "priority", *SAMPLING_FIELDS)}
        sampling = SamplingFields.model_validate({name: chosen[name] for name in SAMPLING_FIELDS}).sampling
        options = ContextOptions(voice, chosen["seed"], chosen["priority"], sampling, self.output)
        await connection.open_context(start.context_id, options)

    def render(self, event: Event) -> Sequence[Frame]:
        named = _named(event)
        if isinstance(event, Audio):
            if self.start is not None and self.start.audio_transport == "json":
                return [_json({"type": "audio", **named, "audio": base64.b64encode(event.audio).decode("ascii")})]
            return [event.audio]
        if isinstance(event, SegmentQueued):
            return [_json({"type": "segment.queued", **named, "index": event.index, "text": event.text, "task_id": event.task_id})]
        if isinstance(event, SegmentDone):
            done = {"index": event.index, "text": event.text, "task_id": event.task_id}
            return [_json({"type": "segment.done", **named, **done, "start_s": event.start_s, "end_s": event.end_s})]
        if isinstance(event, Failure):
            index = {} if event.index is None else {"index": event.index}
            return [_json({"type": "error", **named, "code": event.code, **index, "message": event.message, **event.details})]
        if isinstance(event, Flushed):
            return [_json({"type": "flush.done", **named, "mark": event.mark})]
        if isinstance(event, ContextStarted | ContextDone) and event.context_id is None:
            return []  # the default context is the session itself
        if isinstance(event, ContextStarted):
            return [_json({"type": "context.started", **named})]
        if isinstance(event, ContextDone):
            totals = {"segments": event.segments, "audio_s": event.audio_s, "chars": event.chars}
            return [_json({"type": "context.done", **named, "cancelled": event.cancelled, **totals})]
        if isinstance(event, Opened):
            return [_json(self._started(event))]
        if isinstance(event, ConnectionDone):
            totals = {"segments": event.segments, "audio_s": event.audio_s, "chars": event.chars}
            return [_json({"type": "session.done", "session_id": event.connection_id, "cancelled": event.cancelled, **totals})]
        assert isinstance(event, Ended)
        return [_json({"type": "error", "code": event.code, "message": event.message, **event.details})]

    def _started(self, event: Opened) -> dict[str, Any]:
        started: dict[str, Any] = {"type": "session.started", "session_id": event.connection_id, "encoding": self.output.encoding}
        started |= {"sample_rate": self.output.sample_rate, "channels": 1, "idle_s": event.idle_s}
        if self.start is not None and self.start.audio_transport != "binary":
            started["audio_transport"] = self.start.audio_transport
        if self.output != PCM16:
            started["output_format"] = self.start.output_format if self.start is not None else "pcm"
        return started

    def close_code(self, code: str) -> int:
        return CLOSE_CODES.get(code, 1011)


def _named(event: Event) -> dict[str, Any]:
    """``{"context_id": ...}`` for an event of a named context; nothing for the default context's."""
    context_id: ContextId = getattr(event, "context_id", None)
    return {} if context_id is None else {"context_id": context_id}
