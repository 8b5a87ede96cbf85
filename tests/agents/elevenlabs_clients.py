"""ElevenLabs' stock clients, unmodified but for base URL and key, run in the frameworks' virtual environment
(``scripts/install_agent_clients.sh``: var/agents-venv) by tests/e2e/test_elevenlabs_clients.py.

    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py sdk ROOT KEY VOICE OUT_DIR FORMAT TEXT  (FORMAT "": none sent)
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py sdk-refusals ROOT KEY VOICE
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py livekit-synthesize ROOT KEY VOICE OUT_DIR TEXT
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py livekit-refusals ROOT KEY VOICE
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py pipecat-http ROOT KEY VOICE OUT_DIR PIECE...
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py livekit-streams ROOT KEY VOICE OUT_DIR
    var/agents-venv/bin/python tests/agents/elevenlabs_clients.py pipecat-ws ROOT KEY VOICE OUT_DIR

``ROOT`` is the server's root URL (``http://127.0.0.1:PORT``): each client is given it as its own documentation says
(the SDK and Pipecat: ``base_url=ROOT``; LiveKit: ``base_url=ROOT + "/v1"``). Each call's audio is written to ``OUT_DIR/<call>.bin``
as the client handed it over (the SDK: the bytes of the format asked; LiveKit: its PCM16 frames); one JSON line on
stdout says what each call got (bytes, when the first came, the error it raised, by class and status). This file
imports only the clients (never the ttsq package): it stands for an application's process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def _timed(out: Path | None, call: str, make: Callable[[], Iterator[bytes]]) -> dict[str, Any]:
    """Run one call, reading its audio as the client yields it; its bytes go to ``out/<call>.bin``."""
    started = time.perf_counter()
    found: dict[str, Any] = {"call": call, "bytes": 0, "chunks": 0, "first_chunk_s": None, "error": None}
    audio = bytearray()
    try:
        for chunk in make():
            if found["first_chunk_s"] is None:
                found["first_chunk_s"] = time.perf_counter() - started
            audio += chunk
            found["chunks"] += 1
    except Exception as exc:  # noqa: BLE001 - what the stock client raises is what the test looks at
        found["error"] = _described(exc)
    found["bytes"] = len(audio)
    found["total_s"] = time.perf_counter() - started
    if out is not None:
        (out / f"{call}.bin").write_bytes(bytes(audio))
    return found


def _described(exc: Exception) -> dict[str, Any]:
    """The exception as the application sees it: its class, and the status and body where the client gives them."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    return {"type": type(exc).__name__, "status": status, "body": body if isinstance(body, dict | list) else str(body or exc)[:500]}


def sdk(root: str, key: str, voice: str, out: Path, fmt: str | None, text: str) -> list[dict[str, Any]]:
    """The SDK's four text-to-speech calls; ``fmt`` None: the SDK's default (it sends no ``output_format``)."""
    from elevenlabs.client import ElevenLabs

    client = ElevenLabs(base_url=root, api_key=key)
    tts = client.text_to_speech
    chosen: dict[str, Any] = {} if fmt is None else {"output_format": fmt}

    def with_timestamps() -> Iterator[bytes]:
        answer = tts.convert_with_timestamps(voice, text=text, **chosen)
        assert answer.alignment is None and answer.normalized_alignment is None
        yield base64.b64decode(answer.audio_base_64)

    def stream_with_timestamps() -> Iterator[bytes]:
        for chunk in tts.stream_with_timestamps(voice, text=text, **chosen):
            assert chunk.alignment is None and chunk.normalized_alignment is None
            if chunk.audio_base_64:
                yield base64.b64decode(chunk.audio_base_64)

    return [
        _timed(out, "convert", lambda: tts.convert(voice, text=text, **chosen)),
        _timed(out, "stream", lambda: tts.stream(voice, text=text, **chosen)),
        _timed(out, "convert_with_timestamps", with_timestamps),
        _timed(out, "stream_with_timestamps", stream_with_timestamps),
    ]


def sdk_refusals(root: str, key: str, voice: str) -> list[dict[str, Any]]:
    """What the SDK raises for a bad key, an unknown voice, a format the server does not offer, a malformed body."""
    from elevenlabs.client import ElevenLabs

    good, bad = ElevenLabs(base_url=root, api_key=key), ElevenLabs(base_url=root, api_key="sk_not_a_key")
    return [
        _timed(None, "bad_key", lambda: bad.text_to_speech.convert(voice, text="Hello.", output_format="pcm_24000")),
        _timed(None, "unknown_voice", lambda: good.text_to_speech.convert("21m00Tcm4TlvDq8EDAcm", text="Hello.")),
        _timed(None, "unsupported_format", lambda: good.text_to_speech.stream(voice, text="Hello.", output_format="opus_44100_64")),
        _timed(None, "empty_text", lambda: good.text_to_speech.convert(voice, text="", output_format="pcm_24000")),
    ]


async def _livekit(root: str, key: str, voice: str, text: str, out: Path | None, call: str, **options: Any) -> dict[str, Any]:
    import aiohttp
    from livekit.agents import APIConnectOptions
    from livekit.plugins import elevenlabs

    started = time.perf_counter()
    found: dict[str, Any] = {"call": call, "bytes": 0, "first_chunk_s": None, "sample_rate": None, "error": None}
    audio = bytearray()
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(base_url=f"{root}/v1", api_key=key, voice_id=voice, http_session=session, **options)
        try:
            # No retries: a refusal is raised at once, not after LiveKit's three tries (0.1 s, 2 s, 2 s).
            async with tts.synthesize(text, conn_options=APIConnectOptions(max_retry=0)) as stream:
                async for event in stream:
                    if found["first_chunk_s"] is None:
                        found["first_chunk_s"] = time.perf_counter() - started
                    found["sample_rate"] = event.frame.sample_rate
                    audio += bytes(event.frame.data)
        except Exception as exc:  # noqa: BLE001 - what the stock client raises is what the test looks at
            found["error"] = _described(exc)
        await tts.aclose()
    found["bytes"] = len(audio)
    if out is not None:
        (out / f"{call}.bin").write_bytes(bytes(audio))
    return found


def livekit_synthesize(root: str, key: str, voice: str, out: Path, text: str) -> list[dict[str, Any]]:
    """LiveKit's ``synthesize()`` (``POST .../stream``), in PCM at 24 kHz (what a LiveKit room plays)."""
    return [asyncio.run(_livekit(root, key, voice, text, out, "synthesize", encoding="pcm_24000"))]


def livekit_refusals(root: str, key: str, voice: str) -> list[dict[str, Any]]:
    async def both() -> list[dict[str, Any]]:
        return [
            await _livekit(root, "sk_not_a_key", voice, "Hello.", None, "bad_key", encoding="pcm_24000"),
            await _livekit(root, key, "21m00Tcm4TlvDq8EDAcm", "Hello.", None, "unknown_voice", encoding="pcm_24000"),
        ]

    return asyncio.run(both())


async def _pipecat_http(root: str, key: str, voice: str, out: Path, pieces: list[str]) -> dict[str, Any]:
    import aiohttp
    from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService

    found: dict[str, Any] = {"call": "pipecat_http", "bytes": 0, "sample_rate": None, "errors": []}
    audio = bytearray()

    class Collector(FrameProcessor):  # type: ignore[misc]  # what a transport would play; errors go upstream, before the service
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                audio.extend(frame.audio)
                found["sample_rate"] = frame.sample_rate
            elif isinstance(frame, ErrorFrame):
                found["errors"].append(str(frame.error)[:500])
            await self.push_frame(frame, direction)

    async with aiohttp.ClientSession() as session:
        tts = ElevenLabsHttpTTSService(
            api_key=key, base_url=root, aiohttp_session=session, settings=ElevenLabsHttpTTSService.Settings(voice=voice)
        )
        task = PipelineTask(Pipeline([Collector(), tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))
        await task.queue_frames([*(TTSSpeakFrame(piece) for piece in pieces), EndFrame()])
        await PipelineRunner(handle_sigint=False).run(task)
    found["bytes"] = len(audio)
    (out / "pipecat_http.bin").write_bytes(bytes(audio))
    return found


FIRST_AUDIO_WAIT_S = 60.0
"""How long a stream's writer holds its last word for the stream's first audio: the text ends only after audio came
(or this passes), so that "audio before the text ended" is a fact of the protocol, not a race with the machine's
speed."""

LIVEKIT_SENTENCES = [
    "Hello there, this is the first sentence of the answer. ",
    "And here is a second sentence, streamed word by word. ",
]
"""What the LiveKit streams say, a word at a time; each sentence is 20 characters or more, so LiveKit's tokenizer sends
each as it is (it merges shorter ones into a neighbour)."""


async def _livekit_stream(tts: Any, out: Path, call: str, close_after_first_audio: bool = False) -> dict[str, Any]:
    """One ``tts.stream()`` fed :data:`LIVEKIT_SENTENCES` a word at a time at an LLM's pace; ``close_after_first_audio``:
    ``aclose()`` it once its first audio came (an agent interrupted)."""
    stream = tts.stream()
    started = time.perf_counter()
    found: dict[str, Any] = {"call": call, "bytes": 0, "first_chunk_s": None, "input_ended_s": None, "sample_rate": None}
    found["error"] = None
    audio = bytearray()

    heard = asyncio.Event()
    words = [word for sentence in LIVEKIT_SENTENCES for word in sentence.split()]

    async def write() -> None:
        for index, word in enumerate(words):
            if index == len(words) - 1 and not close_after_first_audio:
                await asyncio.wait_for(heard.wait(), FIRST_AUDIO_WAIT_S)  # an LLM slow to end: audio comes before it
            stream.push_text(word + " ")
            await asyncio.sleep(0.02)
        stream.end_input()
        found["input_ended_s"] = time.perf_counter() - started

    writer = asyncio.create_task(write())
    try:
        async for event in stream:
            if found["first_chunk_s"] is None:
                found["first_chunk_s"] = time.perf_counter() - started
                found["sample_rate"] = event.frame.sample_rate
                heard.set()
            audio += bytes(event.frame.data)
            if close_after_first_audio:
                break
    except Exception as exc:  # noqa: BLE001 - what the stock client raises is what the test looks at
        found["error"] = _described(exc)
    writer.cancel()
    await stream.aclose()
    found["bytes"] = len(audio)
    (out / f"{call}.bin").write_bytes(bytes(audio))
    return found


def livekit_streams(root: str, key: str, voice: str, out: Path) -> list[dict[str, Any]]:
    """LiveKit's ``stream()`` (``multi-stream-input``): two streams at once on its one pooled socket, the second closed
    after its first audio, then a third on the same socket."""

    async def run() -> list[dict[str, Any]]:
        import aiohttp
        from livekit.plugins import elevenlabs

        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(base_url=f"{root}/v1", api_key=key, voice_id=voice, encoding="pcm_24000", http_session=session)
            both = await asyncio.gather(
                _livekit_stream(tts, out, "stream_1"), _livekit_stream(tts, out, "stream_2_closed_early", True)
            )
            third = await _livekit_stream(tts, out, "stream_3")
            await tts.aclose()
        return [*both, third]

    return asyncio.run(run())


PIPECAT_TURNS = [
    "Hello there, this is the first turn of the answer. It will be interrupted before it ends.",
    "This is the second turn. It plays to the very end without interruption.",
]
"""What the Pipecat pipeline's LLM says, a token at a time: turn 1 is interrupted once its first audio came."""


async def _pipecat_ws(root: str, key: str, voice: str, out: Path) -> dict[str, Any]:
    from pipecat.frames.frames import (
        EndFrame,
        ErrorFrame,
        Frame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

    found: dict[str, Any] = {"call": "pipecat_ws", "errors": [], "sample_rate": None, "turns": []}
    turns: list[dict[str, Any]] = [
        {"bytes": 0, "first_chunk_s": None, "input_ended_s": None, "started": 0.0} for _ in PIPECAT_TURNS
    ]
    audio = [bytearray() for _ in PIPECAT_TURNS]
    current = 0
    first_audio, turn_2_stopped, barged_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
    turn_audio = [asyncio.Event() for _ in PIPECAT_TURNS]

    contexts: list[str | None] = []
    """The service's context ids in the order their audio came: a turn's audio is its context's, not what came after
    the driver moved on (audio of turn 1 already on its way down the pipeline when the barge-in is queued is turn 1's)."""

    def turn_of(context_id: str | None) -> int:
        if context_id is None:
            return current
        if context_id not in contexts:
            contexts.append(context_id)
        index = contexts.index(context_id)
        if index >= len(turns):
            found["errors"].append(f"driver: audio of an unexpected context {context_id}")
        return min(index, len(turns) - 1)

    class Collector(FrameProcessor):  # type: ignore[misc]  # before the service: its errors; after it: what is played
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, InterruptionFrame):
                barged_in.set()
            elif isinstance(frame, TTSAudioRawFrame):
                index = turn_of(frame.context_id)
                if index == 0 and barged_in.is_set():
                    found["errors"].append("driver: audio of the interrupted turn after its barge-in")
                turn = turns[index]
                if turn["first_chunk_s"] is None:
                    turn["first_chunk_s"] = time.perf_counter() - turn["started"]
                    turn_audio[index].set()
                audio[index].extend(frame.audio)
                found["sample_rate"] = frame.sample_rate
                first_audio.set()
            elif isinstance(frame, ErrorFrame):
                found["errors"].append(str(frame.error)[:500])
            elif isinstance(frame, TTSStoppedFrame) and len(contexts) == 2 and frame.context_id in (None, contexts[1]):
                turn_2_stopped.set()  # turn 2's own end, not a stop of turn 1 pushed as the barge-in lands
            await self.push_frame(frame, direction)

    ws_root = root.replace("http://", "ws://", 1)
    tts = ElevenLabsTTSService(api_key=key, url=ws_root, settings=ElevenLabsTTSService.Settings(voice=voice))
    task = PipelineTask(Pipeline([Collector(), tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))

    async def llm(index: int, interrupt: bool) -> None:
        nonlocal current
        current = index
        turns[index]["started"] = time.perf_counter()
        await task.queue_frame(LLMFullResponseStartFrame())
        words = PIPECAT_TURNS[index].split()
        for number, word in enumerate(words):
            if interrupt and first_audio.is_set():
                break
            if number == len(words) - 1:  # an LLM slow to end: the turn's audio comes before its text ends
                await asyncio.wait_for(turn_audio[index].wait(), FIRST_AUDIO_WAIT_S)
            await task.queue_frame(LLMTextFrame(word + " "))
            await asyncio.sleep(0.03)  # an LLM's pace
        turns[index]["input_ended_s"] = time.perf_counter() - turns[index]["started"]
        if interrupt:
            await asyncio.wait_for(first_audio.wait(), 30)
            await task.queue_frame(InterruptionFrame())  # the user barged in
            return
        await task.queue_frame(LLMFullResponseEndFrame())

    async def script() -> None:
        await asyncio.sleep(0.5)  # the service connects on the StartFrame
        await llm(0, interrupt=True)
        await llm(1, interrupt=False)
        await asyncio.wait_for(turn_2_stopped.wait(), 60)
        await task.queue_frame(EndFrame())

    running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    try:
        await script()
    except TimeoutError:
        found["errors"].append("driver: a turn's audio or its end did not come within its wait")
        await task.cancel()
    await asyncio.wait_for(running, 60)
    for index, turn in enumerate(turns):
        turn.pop("started")
        turn["bytes"] = len(audio[index])
        (out / f"pipecat_turn_{index + 1}.bin").write_bytes(bytes(audio[index]))
    found["turns"] = turns
    return found


def main(argv: list[str]) -> None:
    mode, root, key, voice, *rest = argv[1:]
    if mode.startswith("pipecat"):
        from loguru import logger  # Pipecat logs every frame at DEBUG

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    if mode == "sdk":
        found = sdk(root, key, voice, Path(rest[0]), rest[1] or None, rest[2])
    elif mode == "sdk-refusals":
        found = sdk_refusals(root, key, voice)
    elif mode == "livekit-synthesize":
        found = livekit_synthesize(root, key, voice, Path(rest[0]), rest[1])
    elif mode == "pipecat-http":
        found = [asyncio.run(_pipecat_http(root, key, voice, Path(rest[0]), rest[1:]))]
    elif mode == "livekit-streams":
        found = livekit_streams(root, key, voice, Path(rest[0]))
    elif mode == "pipecat-ws":
        found = [asyncio.run(_pipecat_ws(root, key, voice, Path(rest[0])))]
    elif mode == "livekit-refusals":
        found = livekit_refusals(root, key, voice)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv)
