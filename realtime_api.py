"""``/v1/tts/realtime``: a WebSocket on which text goes in as it is written and audio comes out as it is made.

The protocol and its rules are :mod:`ttsq.api.realtime` (and docs/realtime.md); this router only hands the socket
over, with the service, the authenticator and the session limits the app was built with (``deps.py``, as every
router gets its own). A key in the handshake's headers is checked before the WebSocket is accepted: a refused one gets
the HTTP answer (401 or 403, ``{"detail": ...}``) instead of a session. A key in ``session.start`` (for clients that
cannot set headers) is checked when it comes: a refusal is then an ``error`` event and close code 4401/4403.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, WebSocket

from deps import AuthenticatorDep, RealtimeServiceDep, app_state
from ttsq.api.realtime import RealtimeConfig, serve_session

router = APIRouter(prefix="/v1/tts", tags=["tts"])

RealtimeConfigDep = Annotated[RealtimeConfig, Depends(app_state("realtime_config"))]
"""The session limits (``REALTIME_*``), built once by the app's lifespan."""


@router.websocket("/realtime")
async def realtime(
    websocket: WebSocket, service: RealtimeServiceDep, authenticator: AuthenticatorDep, config: RealtimeConfigDep
) -> None:
    await serve_session(websocket, service, authenticator, config)
