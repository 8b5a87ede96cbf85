"""The voice-agent frameworks' own TTS clients, unmodified but for base URL and key, run in the frameworks' virtual
environment (``scripts/install_agent_clients.sh``: var/agents-venv) by tests/e2e/test_agent_clients.py.

    var/agents-venv/bin/python tests/agents/clients.py livekit|pipecat BASE_URL KEY MODEL TEXT...
    PYTHONPATH=integrations/livekit-plugins-ttsq:integrations/ttsq-pipecat var/agents-venv/bin/python tests/agents/clients.py \
        livekit-stream|pipecat-stream BASE_URL KEY VOICE TOKEN...

Prints one JSON line: the audio the client got (PCM16 bytes, sample rate) and when the first audio came relative to
the request (seconds). With the OpenAI clients each text argument is one piece (LiveKit: one ``synthesize`` per
piece, as its sentence-splitting adapter does; Pipecat: one ``TTSSpeakFrame`` per piece through a pipeline); with
ttsq's own plugins each is a token streamed in, and the line says whether audio came before the input ended.
This file imports only the frameworks and the plugins in integrations/ (never the ttsq package): it stands for an
agent's process.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def livekit(base_url: str, key: str, model: str, pieces: list[str]) -> dict[str, Any]:
    from livekit.plugins import openai  # the plugin LiveKit Agents' docs use for OpenAI TTS

    tts = openai.TTS(model=model, voice="alloy", base_url=f"{base_url}/v1", api_key=key)
    started = time.perf_counter()
    first: float | None = None
    pcm = bytearray()
    rate = 0
    for piece in pieces:
        async with tts.synthesize(piece) as stream:
            async for event in stream:
                if first is None:
                    first = time.perf_counter() - started
                pcm += bytes(event.frame.data)
                rate = event.frame.sample_rate
    await tts.aclose()
    return {"pcm_bytes": len(pcm), "sample_rate": rate, "first_audio_s": first}


def collector(found: dict[str, Any], started: float) -> Any:
    """A Pipecat pipeline's sink (what a transport would play): counts the audio into ``found``, notes when the first
    came (and, where ``found`` tracks it, whether the input had ended by then), and keeps the errors."""
    from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    class Collector(FrameProcessor):  # type: ignore[misc]
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                if found["first_audio_s"] is None:
                    found["first_audio_s"] = time.perf_counter() - started
                    if "input_ended" in found:
                        found["audio_before_input_ended"] = not found["input_ended"]
                found["pcm_bytes"] += len(frame.audio)
                found["sample_rate"] = frame.sample_rate
            elif isinstance(frame, ErrorFrame):
                found["errors"].append(str(frame.error))
            await self.push_frame(frame, direction)

    return Collector()


async def pipecat(base_url: str, key: str, model: str, pieces: list[str]) -> dict[str, Any]:
    from pipecat.frames.frames import EndFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.services.openai.tts import OpenAITTSService

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "errors": []}
    started = time.perf_counter()
    tts = OpenAITTSService(api_key=key, base_url=f"{base_url}/v1", voice="alloy", model=model)
    task = PipelineTask(Pipeline([tts, collector(found, started)]), params=PipelineParams(audio_out_sample_rate=24_000))
    await task.queue_frames([*(TTSSpeakFrame(piece) for piece in pieces), EndFrame()])
    await PipelineRunner(handle_sigint=False).run(task)
    return found


async def livekit_stream(base_url: str, key: str, voice: str, pieces: list[str]) -> dict[str, Any]:
    """ttsq's own LiveKit plugin (integrations/): LiveKit's ``tts.stream()`` contract, text pushed a piece at a time
    while the audio is read; says whether audio came before the text ended."""
    from livekit.plugins import ttsq

    tts = ttsq.TTS(base_url=base_url, api_key=key if key.startswith("ttsq_") else None, voice=voice, seed=7)
    stream = tts.stream()
    started = time.perf_counter()
    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "input_ended": False}
    found["audio_before_input_ended"] = False

    async def write() -> None:
        for piece in pieces:
            stream.push_text(piece)
            await asyncio.sleep(0.05)  # an LLM's pace
            if found["first_audio_s"] is not None and not found["input_ended"]:
                found["audio_before_input_ended"] = True
        await asyncio.sleep(0)
        found["input_ended"] = True
        stream.end_input()

    writing = asyncio.create_task(write())
    async for event in stream:
        if found["first_audio_s"] is None:
            found["first_audio_s"] = time.perf_counter() - started
        found["pcm_bytes"] += len(bytes(event.frame.data))
        found["sample_rate"] = event.frame.sample_rate
    await writing
    await stream.aclose()
    await tts.aclose()
    return found


async def pipecat_stream(base_url: str, key: str, voice: str, pieces: list[str]) -> dict[str, Any]:
    """ttsq's own Pipecat service (integrations/) in a pipeline, fed an LLM's reply token by token (the frames an LLM
    service pushes: a response start, text frames, a response end); says whether audio came before the reply ended."""
    from pipecat.frames.frames import (
        EndFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from ttsq_pipecat import TTSQTTSService

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "errors": []}
    found["input_ended"] = False
    found["audio_before_input_ended"] = False
    started = time.perf_counter()
    tts = TTSQTTSService(base_url=base_url, api_key=key if key.startswith("ttsq_") else None, voice=voice, seed=7)
    task = PipelineTask(Pipeline([tts, collector(found, started)]), params=PipelineParams(audio_out_sample_rate=24_000))

    async def llm() -> None:  # an LLM's reply, a token at a time
        await task.queue_frame(LLMFullResponseStartFrame())
        for piece in pieces:
            await task.queue_frame(LLMTextFrame(piece))
            await asyncio.sleep(0.05)
        found["input_ended"] = True
        await task.queue_frames([LLMFullResponseEndFrame(), EndFrame()])

    writing = asyncio.create_task(llm())
    await PipelineRunner(handle_sigint=False).run(task)
    await writing
    return found


def main(argv: list[str]) -> None:
    framework, base_url, key, model, *pieces = argv[1:]
    run = {"livekit": livekit, "pipecat": pipecat, "livekit-stream": livekit_stream, "pipecat-stream": pipecat_stream}[framework]
    print(json.dumps(asyncio.run(run(base_url, key, model, pieces))))


if __name__ == "__main__":
    main(sys.argv)
