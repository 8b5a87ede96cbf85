"""``/v1/tts/realtime``: a WebSocket on which text goes in as it is written and audio comes out as it is made.

The protocol and its rules are :mod:`ttsq.api.sessions.ttsq_protocol` (and docs/realtime.md), served by the session
engine (:mod:`ttsq.api.sessions.engine`, built once by the app's lifespan, ``app.state.sessions``); this router only
hands the socket over. A key in the handshake's headers is checked before the WebSocket is accepted: a refused one gets
the HTTP answer (401 or 403, ``{"detail": ...}``) instead of a session. A key in ``session.start`` (for clients that
cannot set headers) is checked when it comes: a refusal is then an ``error`` event and close code 4401/4403.
"""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from deps import SessionsDep
from ttsq.api.sessions.ttsq_protocol import TtsqProtocol

router = APIRouter(prefix="/v1/tts", tags=["tts"])


@router.websocket("/realtime")
async def realtime(websocket: WebSocket, sessions: SessionsDep) -> None:
    await sessions.serve(websocket, TtsqProtocol(sessions.config))
