"""First audio after the first sentence is complete, through each stock streaming client and ttsq's own protocol, run
in the frameworks' virtual environment (``scripts/install_agent_clients.sh``: var/agents-venv) by
``bench.listening.protocols``: one path per process, as an agent's would be.

    var/agents-venv/bin/python tests/agents/first_audio_clients.py PATH ROOT KEY VOICE TEXT PACE_S

``PATH`` is one of :data:`PATHS`: ``ttsq-realtime`` (a plain WebSocket client on ``/v1/tts/realtime``),
``livekit-elevenlabs`` / ``livekit-cartesia`` (LiveKit's plugin, ``TTS(base_url=…).stream()``), ``pipecat-elevenlabs`` /
``pipecat-cartesia`` (Pipecat's ``ElevenLabsTTSService`` / ``CartesiaTTSService`` in a pipeline fed ``LLMTextFrame``\\ s).
Each client is connected first (LiveKit's ``prewarm()``; Pipecat connects on its start frame; ttsq's socket opens
and its session starts), then TEXT is written a word at a time, ``PACE_S`` seconds apart, each word with its trailing
space, as an LLM writes it. Once the first audio frame comes the client stops (LiveKit closes its stream, Pipecat is
interrupted, ttsq's session is cancelled), so nothing of this path is still synthesising when the next path is timed.

Prints one JSON line: ``complete`` (``time.monotonic()`` just before the word that ends TEXT's first sentence was
handed to the client), ``sent`` (when the client's socket first sent a message holding that word: the clients are
watched, never changed, by wrapping the socket libraries' send methods, aiohttp's and websockets'), ``first_audio``
(when the first audio frame reached the application), ``first_audio_after_complete_s`` (first audio - complete, the
figure), ``client_hold_s`` (sent - complete: what the client's own text buffering adds), ``sent_message`` (that
message, as the server got it) and ``error`` (null when none).
All clocks are read in this process, so the figures are what an agent's process sees. Imports only the clients (never
the ttsq package).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

PATHS = ("ttsq-realtime", "livekit-elevenlabs", "pipecat-elevenlabs", "livekit-cartesia", "pipecat-cartesia")
CONNECT_WAIT_S = 1.5
"""How long a client is given to open its socket before the first word (LiveKit's prewarm, Pipecat's start frame):
the figure is about the text, not the handshake."""
FIRST_AUDIO_WAIT_S = 120.0
"""Longest wait for the first audio once the text is written: past it the path reports an error."""


def first_sentence_words(words: list[str]) -> int:
    """How many words make the first sentence: up to the first ending in ``.``, ``!`` or ``?``."""
    for index, word in enumerate(words):
        if word.rstrip("\"')").endswith((".", "!", "?")):
            return index + 1
    return len(words)


def first_sentence_end(text: str) -> str:
    """The word that ends TEXT's first sentence (what :func:`watch_sends` looks for)."""
    words = text.split(" ")
    return words[first_sentence_words(words) - 1]


class Timing:
    """The two moments the benchmark reads, and the error if the path failed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.complete: float | None = None
        self.sent: float | None = None
        self.sent_message: str | None = None
        self.first_audio: float | None = None
        self.error: str | None = None
        self.heard = asyncio.Event()

    def audio(self) -> None:
        if self.first_audio is None:
            self.first_audio = time.monotonic()
            self.heard.set()

    def line(self) -> dict[str, Any]:
        after = None if self.complete is None or self.first_audio is None else self.first_audio - self.complete
        error = self.error or (None if after is not None else "no audio")
        hold = None if self.complete is None or self.sent is None else self.sent - self.complete
        return {
            "path": self.path,
            "complete": self.complete,
            "sent": self.sent,
            "first_audio": self.first_audio,
            "first_audio_after_complete_s": after,
            "client_hold_s": hold,
            "sent_message": self.sent_message,
            "error": error,
        }


def watch_sends(timing: Timing, word: str) -> None:
    """Note in ``timing.sent`` when a socket first sends a text message holding ``word`` (the first sentence's last):
    aiohttp's ``send_str`` (LiveKit) and websockets' ``send`` (Pipecat, ttsq's own client), wrapped, not replaced."""
    import aiohttp
    from websockets.asyncio.client import ClientConnection

    def noting(send: Any) -> Any:
        async def wrapped(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
            if timing.sent is None and isinstance(data, str) and word in data:
                timing.sent = time.monotonic()
                timing.sent_message = data[:300]
            return await send(self, data, *args, **kwargs)

        return wrapped

    aiohttp.ClientWebSocketResponse.send_str = noting(aiohttp.ClientWebSocketResponse.send_str)
    ClientConnection.send = noting(ClientConnection.send)  # type: ignore[method-assign]


async def write_words(timing: Timing, text: str, pace_s: float, push: Any) -> None:
    """Hand TEXT to ``push`` a word at a time until the first audio came (or the text ends)."""
    words = text.split(" ")
    ends_first = first_sentence_words(words)
    for index, word in enumerate(words, start=1):
        if timing.heard.is_set():
            return
        if index == ends_first:
            timing.complete = time.monotonic()
        await push(word + " ")
        await asyncio.sleep(pace_s)


async def ttsq_realtime(root: str, key: str, voice: str, text: str, pace_s: float) -> Timing:
    from websockets.asyncio.client import connect

    timing = Timing("ttsq-realtime")
    watch_sends(timing, first_sentence_end(text))
    url = root.replace("http://", "ws://", 1) + "/v1/tts/realtime"
    async with connect(url, additional_headers={"X-API-Key": key}, max_size=None, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "session.start", "voice": voice}))
        started = json.loads(await ws.recv())
        if started.get("type") == "error":
            timing.error = json.dumps(started)
            return timing

        async def push(word: str) -> None:
            await ws.send(json.dumps({"type": "text", "text": word}))

        writer = asyncio.create_task(write_words(timing, text, pace_s, push))
        try:
            async with asyncio.timeout(FIRST_AUDIO_WAIT_S):
                async for message in ws:
                    if isinstance(message, bytes):
                        timing.audio()
                        await ws.send(json.dumps({"type": "cancel"}))
                        break
                    if json.loads(message).get("type") == "error":
                        timing.error = str(message)[:500]
                        break
        except TimeoutError:
            timing.error = f"no audio within {FIRST_AUDIO_WAIT_S:.0f}s"
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
    return timing


async def livekit(plugin: str, root: str, key: str, voice: str, text: str, pace_s: float) -> Timing:
    import aiohttp
    from livekit.agents import APIConnectOptions

    timing = Timing(f"livekit-{plugin}")
    watch_sends(timing, first_sentence_end(text))
    async with aiohttp.ClientSession() as session:
        if plugin == "elevenlabs":
            from livekit.plugins import elevenlabs

            tts: Any = elevenlabs.TTS(
                base_url=f"{root}/v1", api_key=key, voice_id=voice, encoding="pcm_24000", http_session=session
            )
        else:
            from livekit.plugins import cartesia

            tts = cartesia.TTS(base_url=root, api_key=key, voice=voice, http_session=session)
        tts.prewarm()
        await asyncio.sleep(CONNECT_WAIT_S)
        stream = tts.stream(conn_options=APIConnectOptions(max_retry=0))

        async def push(word: str) -> None:
            stream.push_text(word)

        writer = asyncio.create_task(write_words(timing, text, pace_s, push))
        try:
            async with asyncio.timeout(FIRST_AUDIO_WAIT_S):
                async for _event in stream:
                    timing.audio()
                    break
        except TimeoutError:
            timing.error = f"no audio within {FIRST_AUDIO_WAIT_S:.0f}s"
        except Exception as exc:  # noqa: BLE001 - what the stock client raises is the finding
            timing.error = f"{type(exc).__name__}: {str(exc)[:400]}"
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        await stream.aclose()
        await tts.aclose()
    return timing


async def pipecat(service: str, root: str, key: str, voice: str, text: str, pace_s: float) -> Timing:
    from pipecat.frames.frames import (
        EndFrame,
        ErrorFrame,
        Frame,
        InterruptionFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    timing = Timing(f"pipecat-{service}")
    watch_sends(timing, first_sentence_end(text))
    errors: list[str] = []
    ws_root = root.replace("http://", "ws://", 1)

    class Collector(FrameProcessor):  # type: ignore[misc]  # before the service: its errors; after it: what is played
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                timing.audio()
            elif isinstance(frame, ErrorFrame):
                errors.append(str(frame.error)[:300])
            await self.push_frame(frame, direction)

    if service == "elevenlabs":
        from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

        tts: Any = ElevenLabsTTSService(api_key=key, url=ws_root, settings=ElevenLabsTTSService.Settings(voice=voice))
    else:
        from pipecat.services.cartesia.tts import CartesiaTTSService

        tts = CartesiaTTSService(
            api_key=key, url=f"{ws_root}/tts/websocket", settings=CartesiaTTSService.Settings(voice=voice)
        )
    task = PipelineTask(Pipeline([Collector(), tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))

    async def push(word: str) -> None:
        await task.queue_frame(LLMTextFrame(word))

    async def script() -> None:
        await asyncio.sleep(CONNECT_WAIT_S)  # the service connects on its start frame
        await task.queue_frame(LLMFullResponseStartFrame())
        await write_words(timing, text, pace_s, push)
        try:
            await asyncio.wait_for(timing.heard.wait(), FIRST_AUDIO_WAIT_S)
        except TimeoutError:
            timing.error = f"no audio within {FIRST_AUDIO_WAIT_S:.0f}s"
        await task.queue_frame(InterruptionFrame())  # the rest is not wanted: its context is cancelled
        await task.queue_frame(EndFrame())

    running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    await script()
    try:
        await asyncio.wait_for(running, 60)
    except TimeoutError:
        await task.cancel()
    if errors and timing.error is None:
        timing.error = "; ".join(errors)
    return timing


async def run(path: str, root: str, key: str, voice: str, text: str, pace_s: float) -> Timing:
    if path == "ttsq-realtime":
        return await ttsq_realtime(root, key, voice, text, pace_s)
    framework, _, protocol = path.partition("-")
    if framework == "livekit":
        return await livekit(protocol, root, key, voice, text, pace_s)
    return await pipecat(protocol, root, key, voice, text, pace_s)


def main(argv: list[str]) -> None:
    path, root, key, voice, text, pace = argv[1:]
    if path not in PATHS:
        raise SystemExit(f"unknown path {path!r}: one of {', '.join(PATHS)}")
    if path.startswith("pipecat"):
        from loguru import logger  # Pipecat logs every frame at DEBUG

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    timing = asyncio.run(run(path, root, key, voice, text, float(pace)))
    print(json.dumps(timing.line()), flush=True)


if __name__ == "__main__":
    main(sys.argv)
