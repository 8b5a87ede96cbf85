"""The WebSocket beneath every realtime protocol: how a client frame is read, what a client that went away looks like,
how the socket is read into a bounded inbox, and how a handshake is refused.

Apart from the protocols (:mod:`.ttsq_protocol` and the others) because all of them read and refuse the same way: the
HTTP routes' rules for JSON (:func:`ttsq.api.bodies.read_json`: duplicate keys, ``NaN``, lone surrogates refused), one
message limit (``REALTIME_MAX_MESSAGE_BYTES``), one answer to a refused handshake (the HTTP status, ``{"detail"}``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ttsq.api.bodies import read_json

__all__ = [
    "REDIS_DOWN",
    "ConnectionEnded",
    "Disconnected",
    "Frame",
    "Inbox",
    "problem",
    "read_frame",
    "receive_into",
    "refuse",
    "transmit",
]

REDIS_DOWN = "the job store (Redis) is unreachable; please retry shortly"

Frame = str | bytes
"""One WebSocket frame out: text (JSON) or binary (audio)."""

Inbox = asyncio.Queue[dict[str, Any]]
"""The client's messages, read from the socket by a task of their own (:func:`receive_into`), at most
:attr:`RealtimeConfig.inbox_messages` of them."""


class ConnectionEnded(Exception):
    """Ends the connection: its protocol's last word (``code``, ``message`` and ``details``: :class:`.events.Ended`), then
    the close code its protocol gives ``code``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class Disconnected(Exception):
    """The client went away."""


def problem(exc: ValidationError) -> str:
    """A validation error in a sentence: where (``text``, ``context_id``) and what."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "message"
    return f"{where}: {first['msg']}"


def too_big(limit: int) -> ConnectionEnded:
    return ConnectionEnded("message_too_big", f"a message is at most {limit} bytes (REALTIME_MAX_MESSAGE_BYTES)")


def read_frame(message: dict[str, Any], limit: int) -> Any:
    """A client frame's JSON value, read by the HTTP routes' rules (:func:`ttsq.api.bodies.read_json`), or
    :class:`ValueError` saying what is wrong with it (a frame too large: :class:`ConnectionEnded`)."""
    if message.get("bytes") is not None:
        if len(message["bytes"]) > limit:
            raise too_big(limit)
        raise ValueError("binary frames are not accepted: send JSON messages as text frames")
    raw = (message.get("text") or "").encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise too_big(limit)
    try:
        return read_json(raw)
    except RequestValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:])
        said = str(first["msg"]).replace("the request body", "the message")
        raise ValueError(f"{where}: {said}" if where else said) from None


async def receive_into(websocket: WebSocket, inbox: Inbox) -> None:
    """The client's messages into ``inbox``; while it is full, nothing is read (the server stops reading the socket,
    and TCP's flow control holds the client back)."""
    while True:
        message = dict(await websocket.receive())
        await inbox.put(message)
        if message["type"] == "websocket.disconnect":
            return


async def transmit(websocket: WebSocket, send: Awaitable[None]) -> None:
    """One frame out; a client that is gone is :class:`Disconnected`, whichever way the server says so."""
    try:
        await send
    except (WebSocketDisconnect, OSError):
        raise Disconnected from None
    except RuntimeError:  # Starlette: a send on a socket already closed (WebSocketDisconnected)
        if websocket.application_state is WebSocketState.DISCONNECTED:
            raise Disconnected from None
        raise


def connected(websocket: WebSocket) -> bool:
    return websocket.application_state is WebSocketState.CONNECTED and websocket.client_state is WebSocketState.CONNECTED


async def close(websocket: WebSocket, frames: list[Frame], code: int, reason: str) -> None:
    """Send ``frames``, then close with ``code``; nothing when the client is gone already."""
    if not connected(websocket):
        return
    try:
        for frame in frames:
            await (websocket.send_bytes(frame) if isinstance(frame, bytes) else websocket.send_text(frame))
        await websocket.close(code, reason=reason[:120])
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
