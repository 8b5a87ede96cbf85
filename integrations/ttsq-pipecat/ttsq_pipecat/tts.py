"""A Pipecat TTS service for ttsq's realtime route: the LLM's tokens go in as they come, audio comes back as made.

    from ttsq_pipecat import TTSQTTSService

    tts = TTSQTTSService(base_url="http://ttsq:8000", voice="zh_female")
    pipeline = Pipeline([transport.input(), stt, context_aggregator.user(), llm, tts, transport.output(), ...])

Each Pipecat turn (an LLM reply, or a ``TTSSpeakFrame``) is one ttsq realtime session (``/v1/tts/realtime``,
docs/realtime.md): tokens are sent as they arrive (Pipecat's ``TextAggregationMode.TOKEN``, the default here), ttsq
cuts the sentences itself and starts each the moment it is complete, the end of the turn closes the session (the
rest is spoken), and an interruption cancels it (the chunks not yet sent stop on the workers). Audio is PCM16 at
24 kHz, mono, appended to the turn's audio context as it arrives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from websockets.asyncio.client import ClientConnection, connect

__all__ = ["TTSQTTSService"]

SAMPLE_RATE = 24_000


class TTSQTTSService(TTSService):
    """ttsq as Pipecat's TTS, text streamed in: one realtime session per turn."""

    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: int | None = None,
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
        **kwargs: Any,
    ) -> None:
        """``base_url``: the ttsq API (http or ws scheme); ``voice``, ``seed``, ``speed``: as on ``/v1/tts/submit``."""
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            push_start_frame=True,
            push_stop_frames=False,  # pushed at each session's end, when its audio is all there
            sample_rate=SAMPLE_RATE,
            settings=TTSSettings(model="chattts", voice=voice, language=None),
            **kwargs,
        )
        self._ttsq_url = base_url.rstrip("/").replace("http://", "ws://").replace("https://", "wss://") + "/v1/tts/realtime"
        self._ttsq_headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._ttsq_start: dict[str, Any] = {"type": "session.start"}
        for name, value in (("voice", voice), ("seed", seed), ("speed", speed)):
            if value is not None:
                self._ttsq_start[name] = value
        self._ttsq_sessions: dict[str, ClientConnection] = {}
        self._ttsq_readers: dict[str, asyncio.Task[None]] = {}

    def can_generate_metrics(self) -> bool:
        return True

    async def _session(self, context_id: str) -> ClientConnection:
        """The turn's session, opened with its first text."""
        ws = self._ttsq_sessions.get(context_id)
        if ws is None:
            ws = await connect(self._ttsq_url, additional_headers=self._ttsq_headers, max_size=None)
            await ws.send(json.dumps(self._ttsq_start))
            started = json.loads(await ws.recv())
            if started.get("type") != "session.started":
                raise RuntimeError(f"ttsq refused the session: {started}")
            self._ttsq_sessions[context_id] = ws
            self._ttsq_readers[context_id] = self.create_task(self._read(context_id, ws), f"ttsq-{context_id}")
        return ws

    async def _read(self, context_id: str, ws: ClientConnection) -> None:
        """The session's audio into the turn's audio context; its end closes the context."""
        problem: str | None = None
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    await self.stop_ttfb_metrics()
                    await self.append_to_audio_context(
                        context_id, TTSAudioRawFrame(message, SAMPLE_RATE, 1, context_id=context_id)
                    )
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    problem = f"{event['code']}: {event['message']}"
                    logger.warning(f"{self}: ttsq: {problem}")
        finally:
            self._ttsq_sessions.pop(context_id, None)
            self._ttsq_readers.pop(context_id, None)
        if ws.close_code not in (1000, None):
            await self.push_error(error_msg=f"ttsq realtime session ended ({ws.close_code}): {problem}")
        await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
        await self.remove_audio_context(context_id)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send ``text`` (a token, or a whole text) into the turn's session; its audio arrives on the session."""
        try:
            ws = await self._session(context_id)
            await self.start_ttfb_metrics()
            await ws.send(json.dumps({"type": "text", "text": text}))
        except Exception as exc:  # noqa: BLE001  # a connection refused, a session refused: the pipeline is told
            yield ErrorFrame(error=f"ttsq realtime: {exc}")
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The end of a turn: the rest of its text is spoken, then the session ends."""
        ws = self._ttsq_sessions.get(context_id or "")
        if ws is not None:
            await ws.send(json.dumps({"type": "close"}))

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """An interruption: the chunks of the turn not yet sent are cancelled on the workers."""
        ws = self._ttsq_sessions.pop(context_id, None)
        reader = self._ttsq_readers.pop(context_id, None)
        if reader is not None:
            await self.cancel_task(reader)
        if ws is not None:
            try:
                await ws.send(json.dumps({"type": "cancel"}))
            finally:
                await ws.close()

    async def cleanup(self) -> None:
        for context_id in list(self._ttsq_sessions):
            await self.on_audio_context_interrupted(context_id)
        await super().cleanup()  # type: ignore[no-untyped-call]  # Pipecat's is unannotated
