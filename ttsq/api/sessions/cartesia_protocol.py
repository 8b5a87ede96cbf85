"""Cartesia's WebSocket protocol (``GET /tts/websocket``, docs/protocols/cartesia-websocket.md) as an adapter on the
session engine, so that Cartesia's stock clients (LiveKit's and Pipecat's Cartesia services, the ``cartesia`` SDK)
stream text into ttsq with only their base URL and key changed.

The opening: the key in the handshake's ``X-API-Key`` (LiveKit, Pipecat) or ``Authorization: Bearer`` (the SDK), checked
before the socket is accepted as on ttsq's own protocol (a refused key gets the HTTP status, 401/403); the version
(``?cartesia_version=`` or the ``Cartesia-Version`` header) is accepted and ignored. No first message: every message
is self-describing.

Messages (JSON text frames, read as ttsq's own are):

* a generation: ``{"context_id": ID, "model_id", "voice": {"mode": "id", "id": V}, "output_format": {...},
  "language", "add_timestamps", "generation_config": {"speed"}, "transcript": "...", "continue": true}``. The first
  message of a context id opens that context with its options (the voice, speed and format are fixed from then on;
  later messages' options are not read again); every message adds its ``transcript``; ``"flush": true`` asks for a
  ``flush_done`` once what came so far is spoken; ``"continue": false`` ends the context's input: the rest is spoken,
  then ``done``. A message without a ``context_id`` is a context of its own, ended at once (nothing could continue it);
* ``{"context_id": ID, "cancel": true}``: stop that context now; nothing more is sent for it.

Replies, each with ``type`` and ``context_id`` (Pipecat indexes both on every message): ``chunk`` (base64 ``data`` in
the context's format, ``done: false``), ``flush_done``, ``done`` (its own message, after the last chunk: LiveKit ends a
stream only on a ``done`` without ``data``) and ``error``. An error carries ``done: false``: LiveKit reads a message
with ``done: true`` as a plain end and would drop the error's text. A cancelled context gets nothing more. No
``timestamps`` messages: ChatTTS gives no word timings (``add_timestamps`` is accepted and ignored).

Options ttsq cannot honour are accepted and named in :data:`IGNORED_OPTIONS`; speed maps onto ChatTTS's ``[speed_N]``
(:func:`speed_of`). Text pieces are joined as sent, but for one thing: a piece that ends a sentence (Pipecat sends
whole sentences with no trailing space) and a next piece that starts a word get a space between them, so that the
sentence end is seen and the words are not run together.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ttsq.api.cartesia import NAMED_SPEEDS, CartesiaVoice, GenerationConfig
from ttsq.api.sessions.connection import Connection
from ttsq.api.sessions.engine import Opening
from ttsq.api.sessions.events import (
    Audio,
    ContextDone,
    ContextId,
    ContextOptions,
    Ended,
    Event,
    Failure,
    Flushed,
    RealtimeConfig,
)
from ttsq.api.sessions.ttsq_protocol import CLOSE_CODES
from ttsq.api.sessions.wire import Frame, problem, read_frame
from ttsq.domain.output_formats import OutputFormat, UnsupportedFormat, parse_cartesia
from ttsq.domain.sampling import DEFAULT_SAMPLING, MAX_SPEED, MIN_SPEED, Sampling, speed_level

__all__ = ["IGNORED_OPTIONS", "CartesiaMessage", "CartesiaProtocol", "speed_of"]

IGNORED_OPTIONS: dict[str, str] = {
    "model_id": "ttsq has one model, ChatTTS",
    "language": "ChatTTS reads Chinese and English as they are written; it takes no language",
    "pronunciation_dict_id": "Cartesia's dictionaries are not ttsq's; ttsq's own dictionary applies to every request",
    "add_timestamps": "ChatTTS gives no word timings: no timestamps messages are sent",
    "add_phoneme_timestamps": "ChatTTS gives no phoneme timings: none are sent",
    "use_normalized_timestamps": "no timestamps are sent",
    "max_buffer_delay_ms": "ttsq cuts streamed text at sentence ends by its own rule (REALTIME_CLAUSE_WAIT_S)",
    "generation_config.emotion": "ChatTTS takes no emotion control (prosody tokens such as [laugh] in the text do)",
    "generation_config.volume": "the audio is not rescaled",
    "voice.__experimental_controls.emotion": "ChatTTS takes no emotion control",
}
"""Every option Cartesia's API defines that ttsq accepts and does nothing with, and why. Fields Cartesia does not define
are accepted too (its clients add new ones) and ignored."""

SENTENCE_ENDS = frozenset(".!?;:。！？；：…")
"""A piece ending in one of these, followed by a piece that starts a word, gets a space between them."""

STATUS: dict[str, int] = {
    "invalid_message": 400,
    "invalid_context": 400,
    "invalid_text": 400,
    "unknown_context": 404,
    "context_exists": 409,
    "context_closed": 409,
    "closing": 409,
    "too_many_contexts": 429,
    "synthesis_failed": 500,
    "timeout": 408,
    "unauthorized": 401,
    "forbidden": 403,
    "too_much_text": 413,
    "message_too_big": 413,
    "too_many_requests": 429,
    "unavailable": 503,
    "no_worker": 503,
    "internal_error": 500,
}
"""The HTTP status an error's ``status_code`` gives each of the engine's codes (the ``error_code`` says the code)."""


class CartesiaMessage(BaseModel):
    """One client message: a generation (options and a ``transcript``) or a ``cancel``. The options are read when a
    context opens; every field Cartesia defines is accepted (:data:`IGNORED_OPTIONS`), unknown ones too."""

    model_config = ConfigDict(strict=True, extra="allow")

    context_id: str | None = Field(None, min_length=1, max_length=128)
    cancel: bool = False
    transcript: str | None = None
    continue_: bool = Field(False, alias="continue")
    flush: bool = False
    model_id: str | None = None
    voice: CartesiaVoice | None = None
    output_format: dict[str, Any] | None = None
    language: str | None = None
    generation_config: GenerationConfig | None = None
    speed: Literal["slow", "normal", "fast"] | None = None
    pronunciation_dict_id: str | None = None
    add_timestamps: bool | None = None
    add_phoneme_timestamps: bool | None = None
    use_normalized_timestamps: bool | None = None
    max_buffer_delay_ms: int | None = None


def speed_of(message: CartesiaMessage) -> int:
    """ChatTTS's speed: ``generation_config.speed`` (a factor), else the SDK's ``speed`` (a name), else the older
    ``voice.__experimental_controls.speed`` (a name, or -1 slowest to 1 fastest), else the default."""
    if message.generation_config is not None and message.generation_config.speed is not None:
        return speed_level(message.generation_config.speed)
    if message.speed is not None:
        return NAMED_SPEEDS[message.speed]
    controls = message.voice.experimental_controls if message.voice is not None else None
    if controls is None or controls.speed is None:
        return DEFAULT_SAMPLING.speed
    if isinstance(controls.speed, str):
        return NAMED_SPEEDS[controls.speed]
    return round(DEFAULT_SAMPLING.speed + (MAX_SPEED - MIN_SPEED) / 2 * controls.speed)


def output_of(message: CartesiaMessage) -> OutputFormat:
    """The context's format; :class:`ValueError` saying why ttsq cannot make it."""
    if message.output_format is None:
        raise ValueError("output_format: required to start a context (container, encoding, sample_rate)")
    try:
        return parse_cartesia(message.output_format)
    except UnsupportedFormat as exc:
        said = str(exc)
        raise ValueError(said if said.startswith("output_format") else f"output_format: {said}") from None


def voice_of(message: CartesiaMessage) -> str:
    """The ttsq voice a context names; :class:`ValueError` saying why there is none."""
    voice = message.voice
    if voice is None:
        raise ValueError('voice: required to start a context: {"mode": "id", "id": <a ttsq voice>}')
    if voice.mode == "embedding":
        raise ValueError("voice.mode: Cartesia's voice embeddings are not ttsq's: name a ttsq voice with mode 'id'")
    if voice.id is None:
        raise ValueError("voice.id: mode 'id' needs an id: name a ttsq voice")
    return voice.id


@dataclass
class Piece:
    """What the adapter remembers of an open context: how its last text piece ended, and its flushes so far."""

    ended_sentence: bool = False
    flushes: int = 0


def _json(reply: dict[str, Any]) -> str:
    return json.dumps(reply, separators=(",", ":"), ensure_ascii=False)


class CartesiaProtocol:
    """One Cartesia WebSocket's adapter (:class:`.engine.Adapter`)."""

    def __init__(self, config: RealtimeConfig) -> None:
        self.config = config
        self.pieces: dict[str, Piece] = {}
        """The contexts this adapter opened that are not done yet (at most ``REALTIME_MAX_CONTEXTS``)."""

    async def open(self, opening: Opening) -> Connection:
        caller = await opening.caller_before_accept(opening.handshake_key(), required=True)
        assert caller is not None
        await opening.accept()
        return opening.connect(caller, self)

    async def handle(self, connection: Connection, message: Mapping[str, Any]) -> None:
        context_id: ContextId = None
        try:
            value = read_frame(dict(message), self.config.max_message_bytes)
            if not isinstance(value, dict):
                raise ValueError("a message is a JSON object: a generation (context_id, transcript, continue...) or a cancel")
            named = value.get("context_id")
            context_id = named if isinstance(named, str) and 0 < len(named) <= 128 else None
            request = CartesiaMessage.model_validate(value)
        except ValidationError as exc:
            await connection.refuse("invalid_message", problem(exc), context_id)
            return
        except ValueError as exc:
            await connection.refuse("invalid_message", str(exc), context_id)
            return
        if request.cancel:
            if request.context_id is None:
                await connection.refuse("invalid_message", "context_id: a cancel names the context it stops")
                return
            await connection.cancel_context(request.context_id)
            return
        await self._generate(connection, request)

    async def _generate(self, connection: Connection, request: CartesiaMessage) -> None:
        if request.transcript is None:
            await connection.refuse("invalid_message", "transcript: required (send a cancel to stop a context)", request.context_id)
            return
        context_id = request.context_id or uuid.uuid4().hex
        last = request.context_id is None or not request.continue_
        piece = self.pieces.get(context_id)
        if piece is None:
            try:
                voice = await connection.voice(voice_of(request))
                output = output_of(request)
            except ValueError as exc:
                await connection.refuse("invalid_context", str(exc), context_id)
                return
            sampling = Sampling.model_validate({**dict(DEFAULT_SAMPLING), "speed": speed_of(request)})
            if await connection.open_context(context_id, ContextOptions(voice, None, None, sampling, output)) is None:
                return
            piece = self.pieces[context_id] = Piece()
        text = request.transcript
        if text:
            if piece.ended_sentence and not text[0].isspace():
                text = " " + text
            piece.ended_sentence = text.rstrip() == text and text[-1] in SENTENCE_ENDS
            # Cartesia's clients send whole sentences (LiveKit's and Pipecat's cut them first), as Cartesia's own
            # buffering assumes: one that ends a transcript is spoken now, not once the next transcript arrives.
            await connection.add_text(context_id, text, whole=True)
        if request.flush:
            piece.flushes += 1
            await connection.flush(context_id, piece.flushes)
        if last:
            await connection.close_context(context_id)

    def render(self, event: Event) -> Sequence[Frame]:
        if isinstance(event, Audio):
            data = base64.b64encode(event.audio).decode("ascii")
            return [_json({"type": "chunk", "context_id": event.context_id, "data": data, "done": False, "status_code": 206})]
        if isinstance(event, Flushed):
            flush = {"flush_done": True, "flush_id": event.mark, "status_code": 206}
            return [_json({"type": "flush_done", "context_id": event.context_id, "done": False, **flush})]
        if isinstance(event, ContextDone):
            piece = self.pieces.pop(event.context_id, None) if event.context_id is not None else None
            if piece is None or event.cancelled:
                return []  # a cancelled context is told nothing more (the engine sends nothing after a cancel but this)
            return [_json({"type": "done", "context_id": event.context_id, "done": True, "status_code": 200})]
        if isinstance(event, Failure | Ended):
            context_id = event.context_id if isinstance(event, Failure) else None
            error = {"status_code": STATUS.get(event.code, 400), "title": event.code, "error_code": event.code}
            said = {"message": event.message, **event.details}  # a timeout's: the text never spoken (unspoken...)
            return [_json({"type": "error", "context_id": context_id, "done": False, **error, **said})]
        return []  # Opened, ContextStarted, SegmentQueued, SegmentDone, ConnectionDone: Cartesia has no word for them

    def close_code(self, code: str) -> int:
        return CLOSE_CODES.get(code, 1011)
