"""Cartesia's stock clients, unmodified but for base URL and key (and a ttsq voice), run in the frameworks' virtual
environment (``scripts/install_agent_clients.sh``: var/agents-venv) by tests/e2e/test_cartesia_clients.py.

    var/agents-venv/bin/python tests/agents/cartesia_clients.py ROOT KEY VOICE OUT_DIR TEXT STEP...

Steps:

* ``livekit-synthesize``: LiveKit Agents' Cartesia plugin, ``TTS(base_url=ROOT).synthesize(TEXT)`` (``POST /tts/bytes``);
* ``livekit-refused``: the same with the voice ``no-such-voice`` and no retries: the error the plugin raises;
* ``pipecat-http``: Pipecat's ``CartesiaHttpTTSService(base_url=ROOT)`` in a pipeline, TEXT as one ``TTSSpeakFrame``;
* ``sdk-generate``: the ``cartesia`` SDK's ``tts.generate`` (``Authorization: Bearer``), a 24 kHz WAV.

Each step writes the audio it got to ``OUT_DIR/<step>.pcm`` (``.wav`` for the SDK) and prints one JSON line: bytes,
sample rate, when the first audio came (seconds from the call), and the error, if any (``null`` when none). Imports only
the clients (never the ttsq package): it stands for an agent's process.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any


async def livekit_synthesize(root: str, key: str, voice: str, text: str, out: Path) -> dict[str, Any]:
    import aiohttp
    from livekit.agents import APIConnectOptions
    from livekit.plugins import cartesia

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "error": None}
    pcm = bytearray()
    async with aiohttp.ClientSession() as session:
        tts = cartesia.TTS(base_url=root, api_key=key, voice=voice, http_session=session)
        started = time.perf_counter()
        try:
            async with tts.synthesize(text, conn_options=APIConnectOptions(max_retry=0)) as stream:
                async for event in stream:
                    if found["first_audio_s"] is None:
                        found["first_audio_s"] = time.perf_counter() - started
                    pcm += bytes(event.frame.data)
                    found["sample_rate"] = event.frame.sample_rate
        except Exception as exc:  # noqa: BLE001 - what the stock client raises is the finding
            found["error"] = f"{type(exc).__name__}: {exc}"
        await tts.aclose()
    await asyncio.to_thread(out.write_bytes, bytes(pcm))
    found["pcm_bytes"] = len(pcm)
    return found


async def pipecat_http(root: str, key: str, voice: str, text: str, out: Path) -> dict[str, Any]:
    import aiohttp
    from pipecat.frames.frames import EndFrame, ErrorFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.cartesia.tts import CartesiaHttpTTSService

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "error": None}
    errors: list[str] = []
    pcm = bytearray()
    started = time.perf_counter()

    class Errors(FrameProcessor):  # type: ignore[misc]
        """Before the service: Pipecat pushes a service's ErrorFrames upstream."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, ErrorFrame):
                errors.append(str(frame.error))
            await self.push_frame(frame, direction)

    class Collector(FrameProcessor):  # type: ignore[misc]
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                if found["first_audio_s"] is None:
                    found["first_audio_s"] = time.perf_counter() - started
                pcm.extend(frame.audio)
                found["sample_rate"] = frame.sample_rate
            await self.push_frame(frame, direction)

    async with aiohttp.ClientSession() as session:
        tts = CartesiaHttpTTSService(
            api_key=key, base_url=root, aiohttp_session=session, settings=CartesiaHttpTTSService.Settings(voice=voice)
        )
        task = PipelineTask(Pipeline([Errors(), tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))
        await task.queue_frames([TTSSpeakFrame(text), EndFrame()])
        await PipelineRunner(handle_sigint=False).run(task)
    await asyncio.to_thread(out.write_bytes, bytes(pcm))
    found["pcm_bytes"] = len(pcm)
    found["error"] = "; ".join(errors) or None
    return found


def sdk_generate(root: str, key: str, voice: str, text: str, out: Path) -> dict[str, Any]:
    from cartesia import Cartesia

    found: dict[str, Any] = {"wav_bytes": 0, "error": None}
    client = Cartesia(api_key=key, base_url=root, max_retries=0)
    started = time.perf_counter()
    try:
        answer = client.tts.generate(
            model_id="sonic-3",
            transcript=text,
            voice={"mode": "id", "id": voice},
            output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 24000},
        )
        audio = answer.read()
        found["first_audio_s"] = time.perf_counter() - started
        out.write_bytes(audio)
        found["wav_bytes"] = len(audio)
    except Exception as exc:  # noqa: BLE001 - what the stock client raises is the finding
        found["error"] = f"{type(exc).__name__}: {exc}"
    return found


async def run(root: str, key: str, voice: str, out_dir: Path, text: str, steps: list[str]) -> None:
    for step in steps:
        if step == "livekit-synthesize":
            found = await livekit_synthesize(root, key, voice, text, out_dir / f"{step}.pcm")
        elif step == "livekit-refused":
            found = await livekit_synthesize(root, key, "no-such-voice", text, out_dir / f"{step}.pcm")
        elif step == "pipecat-http":
            found = await pipecat_http(root, key, voice, text, out_dir / f"{step}.pcm")
        elif step == "sdk-generate":
            found = await asyncio.to_thread(sdk_generate, root, key, voice, text, out_dir / f"{step}.wav")
        else:
            raise SystemExit(f"unknown step {step!r}")
        print(json.dumps({"step": step, **found}), flush=True)


def main(argv: list[str]) -> None:
    root, key, voice, out_dir, text, *steps = argv[1:]
    asyncio.run(run(root, key, voice, Path(out_dir), text, steps))


if __name__ == "__main__":
    main(sys.argv)
