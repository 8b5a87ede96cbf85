"""ElevenLabs' streaming-text WebSockets: ``/v1/text-to-speech/{voice_id}/multi-stream-input`` (several contexts on one
socket, what LiveKit's and Pipecat's ElevenLabs services use) and ``/v1/text-to-speech/{voice_id}/stream-input`` (one).

The protocol is :mod:`ttsq.api.sessions.elevenlabs_protocol` (docs/protocols/elevenlabs-websocket.md), served by the
session engine (:mod:`ttsq.api.sessions.engine`, ``app.state.sessions``) as ttsq's own ``/v1/tts/realtime`` is: this
router only hands the socket over. The key comes in the ``xi-api-key`` header (or ttsq's own headers) and is checked,
with the voice and the query's options, before the WebSocket is accepted: a refusal is the HTTP answer.
"""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from deps import SessionsDep
from ttsq.api.sessions.elevenlabs_protocol import ElevenLabsProtocol

router = APIRouter(prefix="/v1/text-to-speech", tags=["elevenlabs"])


@router.websocket("/{voice_id}/multi-stream-input")
async def multi_stream_input(websocket: WebSocket, voice_id: str, sessions: SessionsDep) -> None:
    await sessions.serve(websocket, ElevenLabsProtocol(voice_id, multi=True))


@router.websocket("/{voice_id}/stream-input")
async def stream_input(websocket: WebSocket, voice_id: str, sessions: SessionsDep) -> None:
    await sessions.serve(websocket, ElevenLabsProtocol(voice_id, multi=False))
