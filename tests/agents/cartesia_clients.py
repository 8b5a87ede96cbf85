"""Cartesia's stock clients, unmodified but for base URL and key (and a ttsq voice), run in the frameworks' virtual
environment (``scripts/install_agent_clients.sh``: var/agents-venv) by tests/e2e/test_cartesia_clients.py.

    var/agents-venv/bin/python tests/agents/cartesia_clients.py ROOT KEY VOICE OUT_DIR TEXT STEP...

Steps:

* ``livekit-synthesize``: LiveKit Agents' Cartesia plugin, ``TTS(base_url=ROOT).synthesize(TEXT)`` (``POST /tts/bytes``);
* ``livekit-refused``: the same with the voice ``no-such-voice`` and no retries: the error the plugin raises;
* ``pipecat-http``: Pipecat's ``CartesiaHttpTTSService(base_url=ROOT)`` in a pipeline, TEXT as one ``TTSSpeakFrame``;
* ``sdk-generate``: the ``cartesia`` SDK's ``tts.generate`` (``Authorization: Bearer``), a 24 kHz WAV;
* ``livekit-stream``: LiveKit's ``TTS(base_url=ROOT).stream()`` (``/tts/websocket``), TEXT pushed a word at a time at an
  LLM's pace, then ``end_input()``;
* ``pipecat-ws``: Pipecat's ``CartesiaTTSService(url=ws://…/tts/websocket)`` in a pipeline fed an LLM's reply token by
  token: turn 1 (TEXT) interrupted once its first audio came, then turn 2 (:data:`TURN_2`) to its end.

Each step writes the audio it got to ``OUT_DIR/<step>.pcm`` (``.wav`` for the SDK; ``pipecat-ws``: ``…-turn1.pcm`` and
``…-turn2.pcm``) and prints one JSON line: bytes, sample rate, when the first audio came (seconds from the call or the
first token), whether it came before the text ended, and the error, if any (``null`` when none). Imports only the
clients (never the ttsq package): it stands for an agent's process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TURN_2 = os.environ.get("CARTESIA_TURN_2") or "This is the second turn. It plays to the very end without interruption."
"""Pipecat's second turn, spoken whole (``CARTESIA_TURN_2``: another, e.g. one long enough to be still written when its
first audio comes)."""
LLM_PACE_S = 0.03
"""Between two tokens, as an LLM writes them."""


def ws_root(root: str) -> str:
    return root.replace("https://", "wss://").replace("http://", "ws://")


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


async def livekit_stream(root: str, key: str, voice: str, text: str, out: Path) -> dict[str, Any]:
    import aiohttp
    from livekit.agents import APIConnectOptions
    from livekit.plugins import cartesia

    found: dict[str, Any] = {"pcm_bytes": 0, "sample_rate": 0, "first_audio_s": None, "error": None}
    found["input_ended_at_s"] = None
    pcm = bytearray()
    async with aiohttp.ClientSession() as session:
        tts = cartesia.TTS(base_url=root, api_key=key, voice=voice, http_session=session)
        stream = tts.stream(conn_options=APIConnectOptions(max_retry=0))
        started = time.perf_counter()

        async def write() -> None:
            for word in text.split(" "):
                stream.push_text(word + " ")
                await asyncio.sleep(LLM_PACE_S)
            stream.end_input()
            found["input_ended_at_s"] = time.perf_counter() - started

        writing = asyncio.create_task(write())
        try:
            async for event in stream:
                if found["first_audio_s"] is None:
                    found["first_audio_s"] = time.perf_counter() - started
                pcm += bytes(event.frame.data)
                found["sample_rate"] = event.frame.sample_rate
        except Exception as exc:  # noqa: BLE001 - what the stock client raises is the finding
            found["error"] = f"{type(exc).__name__}: {exc}"
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)
        await stream.aclose()
        await tts.aclose()
    await asyncio.to_thread(out.write_bytes, bytes(pcm))
    found["pcm_bytes"] = len(pcm)
    ended = found["input_ended_at_s"]
    found["audio_before_text_ended"] = found["first_audio_s"] is not None and (ended is None or found["first_audio_s"] < ended)
    return found


async def pipecat_ws(root: str, key: str, voice: str, text: str, out: Path) -> dict[str, Any]:
    """Turn 1 (``text``) token by token, interrupted once its first audio came; turn 2 token by token to its end, then
    the pipeline's end once turn 2's audio stopped."""
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
    from pipecat.services.cartesia.tts import CartesiaTTSService

    turns: dict[int, dict[str, Any]] = {
        n: {"pcm": bytearray(), "first_audio_s": None, "text_ended": False, "audio_before_text_ended": None, "started": 0.0}
        for n in (1, 2)
    }
    state: dict[str, Any] = {"turn": 1, "sample_rate": 0}
    errors: list[str] = []
    first_audio = asyncio.Event()
    turn2_stopped = asyncio.Event()

    class Errors(FrameProcessor):  # type: ignore[misc]
        """Before the service: Pipecat pushes a service's ErrorFrames upstream."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, ErrorFrame):
                errors.append(str(frame.error)[:300])
            await self.push_frame(frame, direction)

    contexts: list[str | None] = []
    """The service's context ids in the order their audio came: a turn's audio is its context's, not what came after
    the driver moved on (audio of turn 1 already on its way down the pipeline when the barge-in is queued is turn 1's)."""
    barged_in = asyncio.Event()

    def turn_of(context_id: str | None) -> int:
        if context_id is None:
            return int(state["turn"])
        if context_id not in contexts:
            contexts.append(context_id)
        if len(contexts) > len(turns):
            errors.append(f"driver: audio of an unexpected context {context_id}")
        return min(contexts.index(context_id) + 1, len(turns))

    class Collector(FrameProcessor):  # type: ignore[misc]
        """What a transport would play: each turn's audio."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, InterruptionFrame):
                barged_in.set()
            elif isinstance(frame, TTSAudioRawFrame):
                number = turn_of(frame.context_id)
                if number == 1 and barged_in.is_set():
                    errors.append("driver: audio of the interrupted turn after its barge-in")
                turn = turns[number]
                if turn["first_audio_s"] is None:
                    turn["first_audio_s"] = time.perf_counter() - turn["started"]
                    turn["audio_before_text_ended"] = not turn["text_ended"]
                turn["pcm"].extend(frame.audio)
                state["sample_rate"] = frame.sample_rate
                first_audio.set()
            elif isinstance(frame, TTSStoppedFrame) and len(contexts) == 2 and frame.context_id in (None, contexts[1]):
                turn2_stopped.set()  # turn 2's own end, not a stop of turn 1 pushed as the barge-in lands
            await self.push_frame(frame, direction)

    tts = CartesiaTTSService(api_key=key, url=f"{ws_root(root)}/tts/websocket", settings=CartesiaTTSService.Settings(voice=voice))
    task = PipelineTask(Pipeline([Errors(), tts, Collector()]), params=PipelineParams(audio_out_sample_rate=24_000))

    async def llm(number: int, words: str, interrupt: bool) -> None:
        turn = turns[number]
        state["turn"] = number
        turn["started"] = time.perf_counter()
        await task.queue_frame(LLMFullResponseStartFrame())
        for word in words.split(" "):
            if interrupt and first_audio.is_set():
                break
            await task.queue_frame(LLMTextFrame(word + " "))
            await asyncio.sleep(LLM_PACE_S)
        if interrupt:
            try:
                await asyncio.wait_for(first_audio.wait(), 60)
            except TimeoutError:
                errors.append("driver: no audio in turn 1 within 60 s")
            turn["text_ended"] = True
            await task.queue_frame(InterruptionFrame())  # the user barged in
            return
        turn["text_ended"] = True
        await task.queue_frame(LLMFullResponseEndFrame())

    async def script() -> None:
        await asyncio.sleep(0.5)  # the service connects on its StartFrame
        await llm(1, text, interrupt=True)
        await llm(2, TURN_2, interrupt=False)
        try:
            await asyncio.wait_for(turn2_stopped.wait(), 120)
        except TimeoutError:
            errors.append("driver: turn 2 never stopped within 120 s")
        await task.queue_frame(EndFrame())

    runner = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    await script()
    await asyncio.wait_for(runner, 60)
    found: dict[str, Any] = {"sample_rate": state["sample_rate"], "error": "; ".join(errors) or None}
    for number, turn in turns.items():
        await asyncio.to_thread(out.with_name(f"{out.stem}-turn{number}.pcm").write_bytes, bytes(turn["pcm"]))
        found[f"turn{number}"] = {
            "pcm_bytes": len(turn["pcm"]),
            "first_audio_s": turn["first_audio_s"],
            "audio_before_text_ended": turn["audio_before_text_ended"],
        }
    return found


async def run(root: str, key: str, voice: str, out_dir: Path, text: str, steps: list[str]) -> None:
    for step in steps:
        if step == "livekit-synthesize":
            found = await livekit_synthesize(root, key, voice, text, out_dir / f"{step}.pcm")
        elif step == "livekit-refused":
            found = await livekit_synthesize(root, key, "no-such-voice", text, out_dir / f"{step}.pcm")
        elif step == "pipecat-http":
            found = await pipecat_http(root, key, voice, text, out_dir / f"{step}.pcm")
        elif step == "livekit-stream":
            found = await livekit_stream(root, key, voice, text, out_dir / f"{step}.pcm")
        elif step == "pipecat-ws":
            found = await pipecat_ws(root, key, voice, text, out_dir / f"{step}.pcm")
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
