"""LiveKit Agents TTS for ttsq's realtime route: the LLM's text goes in as it is written, audio comes back as made.

    from livekit.plugins import ttsq

    session = AgentSession(tts=ttsq.TTS(base_url="http://ttsq:8000", voice="zh_female"), ...)

``TTS.stream()`` is LiveKit's streaming contract (``push_text``, ``flush``, ``end_input``): one ttsq realtime session
(``/v1/tts/realtime``, docs/realtime.md) per stream, so ttsq cuts the sentences itself and starts each the moment it
is complete; no ``StreamAdapter`` is needed. ``synthesize()`` is a stream fed one text. Audio is PCM16 at 24 kHz,
mono, pushed as it arrives. Each ttsq segment's exact timing is pushed as a timed transcript (the segment's text,
not words: ttsq does not time words).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from livekit.agents import APIConnectionError, APIStatusError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, TimedString

__all__ = ["TTS", "SynthesizeStream"]

SAMPLE_RATE = 24_000


@dataclass
class _Options:
    base_url: str
    api_key: str | None
    voice: str | None
    seed: int | None
    speed: int | None


class TTS(tts.TTS[None]):  # no events of its own beyond LiveKit's
    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: int | None = None,
    ) -> None:
        """``base_url``: the ttsq API (http or ws scheme); ``voice``, ``seed``, ``speed``: as on ``/v1/tts/submit``."""
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=False),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
        )
        self._opts = _Options(base_url.rstrip("/"), api_key, voice, seed, speed)
        self._session: aiohttp.ClientSession | None = None

    @property
    def model(self) -> str:
        return "chattts"

    @property
    def provider(self) -> str:
        return "ttsq"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        return SynthesizeStream(tts=self, conn_options=conn_options)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class SynthesizeStream(tts.SynthesizeStream):
    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._ttsq = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        opts = self._ttsq._opts
        request_id = utils.shortuuid()
        url = opts.base_url.replace("http://", "ws://").replace("https://", "wss://") + "/v1/tts/realtime"
        start: dict[str, Any] = {"type": "session.start"}
        for name in ("voice", "seed", "speed"):
            if getattr(opts, name) is not None:
                start[name] = getattr(opts, name)
        headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
        try:
            ws = await self._ttsq._http().ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(ws_close=10))
        except aiohttp.ClientError as exc:
            raise APIConnectionError(f"ttsq realtime: cannot connect to {url}: {exc}") from exc
        output_emitter.initialize(
            request_id=request_id, sample_rate=SAMPLE_RATE, num_channels=1, mime_type="audio/pcm", stream=True
        )
        output_emitter.start_segment(segment_id=request_id)

        async def write() -> None:
            await ws.send_json(start)
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel):
                    await ws.send_json({"type": "flush"})
                    continue
                self._mark_started()
                await ws.send_json({"type": "text", "text": data})
            await ws.send_json({"type": "close"})

        async def read() -> None:
            problem: str | None = None
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    output_emitter.push(message.data)
                elif message.type == aiohttp.WSMsgType.TEXT:
                    event = json.loads(message.data)
                    if event["type"] == "segment.done":
                        text = TimedString(event["text"], start_time=event["start_s"], end_time=event["end_s"])
                        output_emitter.push_timed_transcript(text)
                    elif event["type"] == "error":
                        problem = f"{event['code']}: {event['message']}"
                else:
                    break
            if ws.close_code != 1000:
                code = ws.close_code or -1
                raise APIStatusError(
                    f"ttsq realtime session ended ({code}): {problem}", status_code=code, retryable=code in (1011, 1013)
                )

        writing = asyncio.create_task(write())
        try:
            await read()
            await writing
            output_emitter.end_segment()
        finally:
            writing.cancel()
            await ws.close()
