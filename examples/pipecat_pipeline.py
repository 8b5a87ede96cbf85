"""A Pipecat pipeline with ttsq as its TTS, fed an LLM's reply token by token; the audio goes to a WAV file.

    pip install ./integrations/ttsq-pipecat
    python examples/pipecat_pipeline.py http://127.0.0.1:8000 out.wav

In an agent, ``transport.output()`` takes the place of the file writer, and an LLM service pushes the frames
``reply()`` pushes here.
"""

from __future__ import annotations

import asyncio
import sys
import wave

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from ttsq_pipecat import TTSQTTSService

REPLY = "Sure. The train leaves at nine, and the trip takes about two hours. Shall I book a seat for you?"


class WavWriter(FrameProcessor):  # type: ignore[misc]  # Pipecat is not in ttsq's own environment
    def __init__(self, out: wave.Wave_write) -> None:
        super().__init__()
        self.out = out

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.out.writeframes(frame.audio)
        await self.push_frame(frame, direction)


async def main(url: str, path: str) -> None:
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        await run(url, out)


async def run(url: str, out: wave.Wave_write) -> None:
    task = PipelineTask(
        Pipeline([TTSQTTSService(base_url=url, voice="zh_female"), WavWriter(out)]),
        params=PipelineParams(audio_out_sample_rate=24_000),
    )

    async def reply() -> None:  # what an LLM service pushes: a start, its tokens as they come, an end
        await task.queue_frame(LLMFullResponseStartFrame())
        for token in REPLY.split(" "):
            await task.queue_frame(LLMTextFrame(token + " "))
            await asyncio.sleep(0.05)
        await task.queue_frames([LLMFullResponseEndFrame(), EndFrame()])

    replying = asyncio.create_task(reply())
    await PipelineRunner(handle_sigint=False).run(task)
    await replying


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
