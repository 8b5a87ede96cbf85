"""The realtime protocol's words: its close codes, its messages, its limits, and how a client frame is read.

Apart from :mod:`ttsq.api.realtime` (the session that serves them) so that what a client may send and what ends a
session are read in one place.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ttsq.api.bodies import read_json
from ttsq.api.schemas import REQUEST_MODEL
from ttsq.domain.jobs import MAX_SEED, Priority
from ttsq.domain.styles import StyledSampling

__all__ = [
    "CLOSE_CODES",
    "REDIS_DOWN",
    "Control",
    "Disconnected",
    "Inbox",
    "RealtimeConfig",
    "SessionEnded",
    "SessionStart",
    "TextPiece",
    "close_with",
    "decode_message",
    "problem",
    "receive_into",
    "refuse",
]

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

REDIS_DOWN = "the job store (Redis) is unreachable; please retry shortly"


@dataclass(frozen=True)
class RealtimeConfig:
    """The session limits (``REALTIME_*``) and the chunk size the workers use (``MAX_CHUNK_CHARS``). Built by app.py."""

    max_chunk_chars: int
    idle_s: float
    """How long a session may go without a message from the client while none of its audio is pending, unless its
    ``session.start`` asks for less (``idle_s``): the default and the most a client may ask for."""
    start_s: float
    """How long a connection may take to send its ``session.start``; nothing else is read before it."""
    max_session_s: float
    """The longest a session may last, however busy."""
    max_chars: int
    """The most text one session may send."""
    clause_wait_s: float
    """How long text without a sentence end (or whose sentence end waits for what follows it) waits before it is
    spoken up to its last sentence end or clause mark."""
    max_message_bytes: int
    """The largest message; a larger one ends the session with 1009."""
    inbox_messages: int
    """The most messages a session holds that it has not handled yet: past it, the socket is not read (TCP holds the
    client back), so what a client sends costs at most this many messages of memory, read or not."""
    key_recheck_s: float
    """How often a session opened with a key asks whether it is still valid (``STREAM_KEY_RECHECK_S``), before and
    after ``close`` alike: one revoked or expired meanwhile ends the session (4401) and nothing more is queued or sent."""
    outage_s: float
    """How long a session keeps trying a Redis call through an outage (``LISTEN_OUTAGE_S``, the stream listener's
    budget too) before it ends with 1013."""
    retry_after_s: int
    """``Retry-After`` of a handshake refused because Redis is unreachable (503)."""
    ahead: int
    """Chunks a session keeps queued beyond the one whose audio is streaming (``REALTIME_AHEAD``): the next is
    queued when a chunk's first audio goes out, so a session's later sentences do not share decode steps with its
    first one while a listener waits for it (on a CPU each row added to a step slows the step)."""


class SessionStart(StyledSampling):
    """The first message: who calls and how the session speaks (the sampling fields and ``style`` as on ``/v1/tts/submit``)."""

    model_config = REQUEST_MODEL

    type: Literal["session.start"]
    voice: str | None = Field(None, max_length=512, description="A voice name, OpenAI voice name or blend.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed; without a voice it picks the speaker.")
    priority: Priority | None = None
    idle_s: float | None = Field(
        None, gt=0, description="This session's idle timeout, in seconds: at most the server's (REALTIME_IDLE_S)."
    )
    api_key: str | None = Field(None, max_length=512, description="The key, where the handshake carried none.")


class TextPiece(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["text"]
    text: str


class Control(BaseModel):
    model_config = REQUEST_MODEL

    type: Literal["flush", "close", "cancel", "keepalive"]


class SessionEnded(Exception):
    """Ends the session: an ``error`` event (``code``, ``message`` and ``details``), then the close code of ``code``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


Inbox = asyncio.Queue[dict[str, Any]]
"""The client's messages, read from the socket by a task of their own (:func:`receive_into`), at most
:attr:`RealtimeConfig.inbox_messages` of them."""


def problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "message"
    return f"{where}: {first['msg']}"


def decode_message(message: dict[str, Any], limit: int) -> dict[str, Any]:
    """A client frame as a JSON object, read by the HTTP routes' rules (:func:`ttsq.api.bodies.read_json`), or
    :class:`ValueError` saying what is wrong with it (a frame too large: :class:`SessionEnded`)."""
    if message.get("bytes") is not None:
        if len(message["bytes"]) > limit:
            raise SessionEnded("message_too_big", f"a message is at most {limit} bytes (REALTIME_MAX_MESSAGE_BYTES)")
        raise ValueError("binary frames are not accepted: send JSON messages as text frames")
    raw = (message.get("text") or "").encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise SessionEnded("message_too_big", f"a message is at most {limit} bytes (REALTIME_MAX_MESSAGE_BYTES)")
    try:
        value = read_json(raw)
    except RequestValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:])
        problem = str(first["msg"]).replace("the request body", "the message")
        raise ValueError(f"{where}: {problem}" if where else problem) from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError('a message is a JSON object with a "type": session.start, text, flush, keepalive, close or cancel')
    return value


class Disconnected(Exception):
    """The client went away."""


async def receive_into(websocket: WebSocket, inbox: Inbox) -> None:
    """The client's messages into ``inbox``; while it is full, nothing is read (the server stops reading the socket,
    and TCP's flow control holds the client back)."""
    while True:
        message = dict(await websocket.receive())
        await inbox.put(message)
        if message["type"] == "websocket.disconnect":
            return


async def close_with(websocket: WebSocket, code: str, message: str | None = None, details: dict[str, Any] | None = None) -> None:
    """End the session: an ``error`` event saying why (when there is a ``message``), then ``code``'s close code; nothing
    when the client is gone already."""
    if websocket.application_state is not WebSocketState.CONNECTED or websocket.client_state is not WebSocketState.CONNECTED:
        return
    try:
        if message is not None:
            await websocket.send_json({"type": "error", "code": code, "message": message, **(details or {})})
        await websocket.close(CLOSE_CODES.get(code, 1011), reason=(message or "")[:120])
    except (RuntimeError, OSError, WebSocketDisconnect):  # the client is gone already
        return


async def refuse(websocket: WebSocket, status: int, message: str, retry_after_s: int) -> None:
    """Refuse the handshake with an HTTP answer (``{"detail": ...}``, as the native routes answer): a client that set
    headers reads its status; a server without the denial-response extension answers 403."""
    headers = {401: {"WWW-Authenticate": 'Bearer realm="ttsq"'}, 503: {"Retry-After": str(retry_after_s)}}.get(status)
    try:
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(JSONResponse({"detail": message}, status_code=status, headers=headers))
        else:
            await websocket.close(1008)
    except (OSError, WebSocketDisconnect, RuntimeError):  # the client is gone already
        return
