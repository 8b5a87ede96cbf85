"""ElevenLabs' streaming-text WebSockets as an adapter on the session engine: ``multi-stream-input`` (several contexts
on one socket: what LiveKit's and Pipecat's ElevenLabs services speak) and single-context ``stream-input``
(docs/protocols/elevenlabs-websocket.md).

The handshake: ``GET /v1/text-to-speech/{voice_id}/multi-stream-input`` (or ``/stream-input``) with the key in the
``xi-api-key`` header (or ttsq's own ``Authorization``/``X-API-Key``), checked before the socket is accepted, as are
the voice (any voice the key may use: ttsq's, its tenant's, a blend, an OpenAI name) and the query's options; a
refusal is the HTTP answer (401, 403, 404, 422) — both stock clients give up on a 4xx at once, and would retry a close
after the accept. The query: ``output_format`` (ElevenLabs' names, :func:`parse_elevenlabs`; none is its default,
``mp3_44100_128``), ``inactivity_timeout`` (seconds: the connection's idle timeout, at most ``REALTIME_IDLE_S``; none is
ElevenLabs' 20 s), ``auto_mode`` (whether text pieces are whole words and sentences: see below); the other options
(``model_id``, ``sync_alignment``, ``language_code``, ``enable_logging``, ``enable_ssml_parsing``,
``apply_text_normalization``...) are accepted and not acted on (:data:`IGNORED_QUERY`: there is one model, and
ChatTTS makes no alignment).

Messages (JSON text frames), ``multi-stream-input``: a message with a ``context_id`` not open opens that context (its
``voice_settings.speed`` → ttsq's speed; the rest of ``voice_settings``, ``generation_config`` and
``pronunciation_dictionary_locators`` are accepted and not acted on); ``text`` is more of its text (an empty one is a
keep-alive); ``flush`` speaks what it holds now; ``close_context`` ends it: right after a flush (or with text in the
same message) it is the end of its input (the rest is spoken, then ``isFinal``), otherwise an interruption (its audio
stops, its chunks are abandoned, then ``isFinal`` at once) — how both stock clients use it; ``close_socket`` ends every
context as after a flush, then the close (1000). A message without a ``context_id`` is the default context's
(``{"text": ""}`` alone: the keep-alive). ``stream-input`` has one context, the default one: its ``{"text": ""}`` ends
the input.

In ``auto_mode`` each text piece is whole words and sentences (Pipecat sends each sentence without the space after
it), so a piece that follows another with no space between them gets one, and a sentence that ends a piece is spoken
at once (ElevenLabs' own meaning of ``auto_mode``: no waiting for more text); otherwise pieces are joined as they come
(tokens), and a sentence end that ends a piece waits for what follows it (a closing quote or a mark may).

Replies: ``{"audio": "<base64 in output_format>", "contextId": ID, "alignment": null, "normalizedAlignment": null}``
(never binary frames: Pipecat's reader crashes on them); ``{"isFinal": true, "contextId": ID}`` in a message of its
own when a context is over (spoken, or interrupted); an error for one message or context as ``{"error": code,
"message": ..., "contextId": ID}`` (LiveKit fails that context; Pipecat reads none); the end of the connection before
its client closed it as an error without ``contextId``, then ttsq's close codes (:data:`.ttsq_protocol.CLOSE_CODES`).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ttsq.api.auth import presented_key
from ttsq.api.sessions.connection import Connection
from ttsq.api.sessions.engine import Opening
from ttsq.api.sessions.events import Audio, ContextDone, ContextId, ContextOptions, Ended, Event, Failure
from ttsq.api.sessions.ttsq_protocol import CLOSE_CODES
from ttsq.api.sessions.wire import Frame, problem, read_frame
from ttsq.domain.output_formats import UnsupportedFormat, parse_elevenlabs
from ttsq.domain.sampling import speed_level

__all__ = ["DEFAULT_INACTIVITY_S", "IGNORED_QUERY", "ElevenLabsProtocol"]

DEFAULT_INACTIVITY_S = 20.0
"""ElevenLabs' inactivity timeout where the client names none (at most ``REALTIME_IDLE_S`` here too)."""

IGNORED_QUERY = (
    "model_id",
    "sync_alignment",
    "language_code",
    "enable_logging",
    "enable_ssml_parsing",
    "apply_text_normalization",
    "apply_language_text_normalization",
    "optimize_streaming_latency",
    "seed",
)
"""Query options accepted and not acted on: one model speaks, ChatTTS makes no alignment, ttsq logs no text and
normalises its own way. (Any other query parameter is let be, as ElevenLabs adds options often.)"""

TRUE, FALSE = ("true", "1"), ("false", "0")


class VoiceSettings(BaseModel):
    """A context's ``voice_settings``: ``speed`` is acted on; ``stability``, ``similarity_boost``, ``style`` and
    ``use_speaker_boost`` (ElevenLabs' voice model's own knobs) are accepted and not."""

    model_config = ConfigDict(extra="forbid")

    speed: float | None = Field(None, ge=0.25, le=4.0, description="A factor: 1.0 the normal pace (ttsq's speed 5).")
    stability: float | None = None
    similarity_boost: float | None = None
    style: float | None = None
    use_speaker_boost: bool | None = None


class Message(BaseModel):
    """One client message of either protocol; the fields are ElevenLabs' (keys in a message are not read: the key is
    the handshake's)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    context_id: str | None = Field(None, min_length=1, max_length=128)
    flush: bool = False
    close_context: bool = False
    close_socket: bool = False
    keep_alive: bool = False
    voice_settings: VoiceSettings | None = None
    generation_config: dict[str, Any] | None = None
    pronunciation_dictionary_locators: list[Any] | None = None
    try_trigger_generation: bool | None = None
    xi_api_key: str | None = None
    authorization: str | None = None


@dataclass
class Written:
    """What a context's text has been so far, for joining pieces: whether the last ended in a word (no space after
    it), and whether the last thing its client did was a flush."""

    in_word: bool = False
    flushed: bool = False


def _json(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise ValueError(f"{name}: true or false, not {value[:40]!r}")


class ElevenLabsProtocol:
    """One ElevenLabs WebSocket's adapter (:class:`.engine.Adapter`): ``multi`` for ``multi-stream-input``, else
    ``stream-input``."""

    def __init__(self, voice_id: str, *, multi: bool) -> None:
        self.voice_id = voice_id
        self.multi = multi
        self.auto_mode = True
        self.output = parse_elevenlabs(None)
        self.written: dict[ContextId, Written] = {}

    async def open(self, opening: Opening) -> Connection:
        headers = opening.websocket.headers
        key = presented_key(headers.get("authorization"), headers.get("x-api-key") or headers.get("xi-api-key"))
        caller = await opening.caller_before_accept(key, required=True)
        assert caller is not None
        query = opening.websocket.query_params
        try:
            self.output = parse_elevenlabs(query.get("output_format"))
        except UnsupportedFormat as exc:
            await opening.refuse(422, f"output_format: {exc}")
        try:
            self.auto_mode = _flag(query, "auto_mode", False)
            idle_s = self._inactivity(query.get("inactivity_timeout"), opening.config.idle_s)
        except ValueError as exc:
            await opening.refuse(422, str(exc))
        try:
            voice = await opening.voice(self.voice_id, caller)
        except ValueError as exc:
            await opening.refuse(404, f"voice_id {self.voice_id[:64]!r}: {exc}")
        await opening.accept()
        connection = opening.connect(caller, self, idle_s=idle_s)
        connection.defaults = ContextOptions(voice, output=self.output)
        return connection

    @staticmethod
    def _inactivity(value: str | None, most_s: float) -> float:
        """``inactivity_timeout`` (whole seconds, as ElevenLabs takes it) as the connection's idle timeout: more than
        the server allows is taken as the server's most (``REALTIME_IDLE_S``), as ElevenLabs caps it at 180 s."""
        if value is None:
            return min(DEFAULT_INACTIVITY_S, most_s)
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"inactivity_timeout: a number of seconds, not {value[:40]!r}") from None
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"inactivity_timeout: more than 0 seconds, not {value[:40]!r}")
        return min(seconds, most_s)

    async def handle(self, connection: Connection, message: Mapping[str, Any]) -> None:
        try:
            value = read_frame(dict(message), connection.config.max_message_bytes)
            if not isinstance(value, dict):
                raise ValueError('a message is a JSON object: {"text": ..., "context_id": ...}')
            said = Message.model_validate(value)
        except ValidationError as exc:
            await connection.refuse("invalid_message", problem(exc), _id_of(message))
            return
        except ValueError as exc:
            await connection.refuse("invalid_message", str(exc), _id_of(message))
            return
        if not self.multi and said.context_id is not None:
            await connection.refuse("invalid_message", "context_id: stream-input has one context; use multi-stream-input")
            return
        await (self._multi(connection, said) if self.multi else self._single(connection, said))

    async def _multi(self, connection: Connection, said: Message) -> None:
        context_id = said.context_id
        opens = context_id not in connection.contexts and (bool(said.text) or said.flush or said.voice_settings is not None)
        if opens and context_id is not None and not await self._open_context(connection, context_id, said):
            return
        if said.text:
            await self._text(connection, context_id, said.text)
        elif said.text is not None or said.keep_alive:
            connection.keep_alive()
        if said.flush:
            await self._flush(connection, context_id)
        if said.close_context:
            await self._close_context(connection, context_id, ends=bool(said.text))
        if said.close_socket:
            await connection.close()

    async def _single(self, connection: Connection, said: Message) -> None:
        if said.voice_settings is not None and None not in connection.contexts and connection.defaults is not None:
            connection.defaults = self._options(connection.defaults, said.voice_settings)
        if said.text:
            await self._text(connection, None, said.text)
        if said.flush:
            await self._flush(connection, None)
        if said.text == "" or said.close_socket:  # stream-input's end of input
            await connection.close()

    async def _open_context(self, connection: Connection, context_id: str, said: Message) -> bool:
        assert connection.defaults is not None
        options = self._options(connection.defaults, said.voice_settings)
        opened = await connection.open_context(context_id, options)
        if opened is not None:
            self.written[context_id] = Written()
        return opened is not None

    @staticmethod
    def _options(defaults: ContextOptions, settings: VoiceSettings | None) -> ContextOptions:
        if settings is None or settings.speed is None:
            return defaults
        sampling = defaults.sampling.model_copy(update={"speed": speed_level(settings.speed)})
        return ContextOptions(defaults.voice, defaults.seed, defaults.priority, sampling, defaults.output)

    async def _text(self, connection: Connection, context_id: ContextId, text: str) -> None:
        written = self.written.setdefault(context_id, Written())
        if self.auto_mode and written.in_word and not text[0].isspace():
            text = " " + text  # whole words and sentences, sent without the space between them
        await connection.add_text(context_id, text, whole=self.auto_mode)
        written.in_word = not text[-1].isspace()
        written.flushed = False

    async def _flush(self, connection: Connection, context_id: ContextId) -> None:
        await connection.flush(context_id)
        self.written.setdefault(context_id, Written()).flushed = True

    async def _close_context(self, connection: Connection, context_id: ContextId, *, ends: bool) -> None:
        """After a flush (or in the message that brings the last text: ``ends``), the end of the context's input;
        otherwise an interruption (both stock clients flush before a normal end, and close without one when their
        listener barged in)."""
        written = self.written.get(context_id)
        if ends or (written is not None and written.flushed):
            await connection.close_context(context_id)
        else:
            await connection.cancel_context(context_id)

    def render(self, event: Event) -> Sequence[Frame]:
        context_id: ContextId = getattr(event, "context_id", None)
        named = {} if context_id is None else {"contextId": context_id}
        if isinstance(event, Audio):
            audio = base64.b64encode(event.audio).decode("ascii")
            return [_json({"audio": audio, **named, "alignment": None, "normalizedAlignment": None})]
        if isinstance(event, ContextDone):
            self.written.pop(event.context_id, None)
            return [_json({"isFinal": True, **named})]
        if isinstance(event, Failure):
            return [_json({"error": event.code, "message": event.message, **named})]
        if isinstance(event, Ended):
            return [_json({"error": event.code, "message": event.message, **event.details})]
        return []

    def close_code(self, code: str) -> int:
        return CLOSE_CODES.get(code, 1011)


def _id_of(message: Mapping[str, Any]) -> str | None:
    """The ``context_id`` of a message refused as a whole, where one can be read from it (so that LiveKit fails that
    context rather than waiting on it)."""
    try:
        value = json.loads(message.get("text") or "")
    except (ValueError, TypeError):
        return None
    found = value.get("context_id") if isinstance(value, dict) else None
    return found[:128] if isinstance(found, str) and found else None
