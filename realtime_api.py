"""``/v1/tts/realtime``: a WebSocket on which text goes in as it is written and audio comes out as it is made.

The protocol and its rules are :mod:`ttsq.api.realtime` (and docs/realtime.md); this router only hands the socket
over, with the service, the authenticator and the session limits the app was built with. Authentication happens
inside the session (a key in the handshake's headers or in ``session.start``), so a refusal is an ``error`` event and
a close code the client can read, not a failed handshake it cannot.
"""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter, WebSocket

from ttsq.api.auth import Authenticator
from ttsq.api.realtime import RealtimeConfig, serve_session
from ttsq.api.service import TTSService

router = APIRouter(prefix="/v1/tts", tags=["tts"])


@router.websocket("/realtime")
async def realtime(websocket: WebSocket) -> None:
    state = websocket.app.state
    await serve_session(
        websocket,
        cast(TTSService, state.service),
        cast(Authenticator, state.authenticator),
        cast(RealtimeConfig, state.realtime_config),
    )
