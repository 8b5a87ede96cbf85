"""The voice-agent frameworks' own TTS clients, unmodified but for base URL and key, run in the frameworks' virtual
environment (``scripts/install_agent_clients.sh``: var/agents-venv) by tests/e2e/test_agent_clients.py.

    var/agents-venv/bin/python tests/agents/clients.py livekit|pipecat BASE_URL KEY MODEL TEXT...

Prints one JSON line: the audio the client got (PCM16 bytes, sample rate, frames) and when the first audio came
relative to the request (seconds). Each text argument is one piece the client is given (LiveKit: one ``synthesize``
per piece, as its sentence-splitting adapter does; Pipecat: one ``TTSSpeakFrame`` per piece through a pipeline).
This file imports only the frameworks (it never imports ttsq): it stands for an agent's process.
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


async def pipecat(base_url: str, key: str, model: str, pieces: list[str]) -> dict[str, Any]:
    from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "errors": []}
    started = time.perf_counter()

    class Collector(FrameProcessor):  # type: ignore[misc]  # the pipeline's sink: what a transport would play
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                if found["first_audio_s"] is None:
                    found["first_audio_s"] = time.perf_counter() - started
                found["pcm_bytes"] += len(frame.audio)
                found["sample_rate"] = frame.sample_rate
            elif isinstance(frame, ErrorFrame):
                found["errors"].append(str(frame.error))
            await self.push_frame(frame, direction)

    tts = OpenAITTSService(api_key=key, base_url=f"{base_url}/v1", voice="alloy", model=model)
    task = PipelineTask(Pipeline([tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))
    await task.queue_frames([*(TTSSpeakFrame(piece) for piece in pieces), EndFrame()])
    await PipelineRunner(handle_sigint=False).run(task)
    return found


def main(argv: list[str]) -> None:
    framework, base_url, key, model, *pieces = argv[1:]
    run = {"livekit": livekit, "pipecat": pipecat}[framework]
    print(json.dumps(asyncio.run(run(base_url, key, model, pieces))))


if __name__ == "__main__":
    main(sys.argv)
