"""``/tts/websocket``: Cartesia's streaming WebSocket, so that Cartesia's stock clients (LiveKit's and Pipecat's Cartesia
services, the ``cartesia`` SDK) stream text into ttsq with only their base URL and key changed.

The protocol is :mod:`ttsq.api.sessions.cartesia_protocol` (docs/protocols/cartesia-websocket.md), served by the session
engine (``app.state.sessions``) as ttsq's own ``/v1/tts/realtime`` is; this router only hands the socket over. The key
comes in the handshake (``X-API-Key`` or ``Authorization: Bearer``) and is checked before the WebSocket is accepted.
"""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from deps import SessionsDep
from ttsq.api.sessions.cartesia_protocol import CartesiaProtocol

router = APIRouter(tags=["cartesia"])


@router.websocket("/tts/websocket")
async def cartesia_websocket(websocket: WebSocket, sessions: SessionsDep) -> None:
    await sessions.serve(websocket, CartesiaProtocol(sessions.config))
