"""``POST /v1/voices`` with a reference recording: checked in the API, encoded by a worker's real DVAE encoder over
Redis (the worker's own :class:`~ttsq.runtime.voice_encoder.VoiceEncoderLoop` on the tiny checkpoint), stored whole
or not at all."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.runtime.test_worker import running_worker
from tests.unit.domain.test_reference_audio import long_flac, wav
from ttsq.domain.reference_audio import decode_reference
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.runtime.voice_encoder import VoiceEncoderLoop
from ttsq.store.keys import Keys
from ttsq.store.queue import JobQueue
from ttsq.store.voice_encodings import VoiceEncodings

TRANSCRIPT = "今天天气很好，我们一起去公园散步吧。"


def audio_file(seconds: float, fmt: str = "WAV", rate: int = 44_100, amplitude: float = 0.2) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    wave = amplitude * np.sin(2 * np.pi * 180 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([wave, wave], 1).astype(np.float32), rate, format=fmt)
    return buffer.getvalue()


def body(name: str, audio: bytes, transcript: str = TRANSCRIPT) -> dict[str, Any]:
    return {"name": name, "audio": base64.b64encode(audio).decode(), "transcript": transcript}


def inline(fn: Any) -> Future[str]:
    """Run ``fn`` at once (the worker runs it on its inference thread; here there is no other use of the model)."""
    future: Future[str] = Future()
    future.set_result(fn())
    return future


@pytest.fixture
async def worker_encoder(redis: Redis, tiny_engine: ChatTTSEngine) -> AsyncIterator[VoiceEncoderLoop]:
    loop = VoiceEncoderLoop(VoiceEncodings(redis, Keys(queue_config().namespace), 0.2), tiny_engine.speaker_from_audio, inline)
    loop.start()
    yield loop
    await loop.stop()


async def test_a_voice_from_a_recording_is_encoded_by_a_worker_stored_used_and_deleted(
    client: httpx.AsyncClient, redis: Redis, tiny_engine: ChatTTSEngine, worker_encoder: VoiceEncoderLoop
) -> None:
    recording = audio_file(4.0, "FLAC")
    created = await client.post("/v1/voices", json=body("cloned", recording))
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["kind"] == "reference" and voice["transcript"] == TRANSCRIPT
    assert voice["prompt"] == tiny_engine.speaker_from_audio(decode_reference(recording)), "the worker's DVAE encoding, at 24 kHz"
    assert "audio" not in voice and worker_encoder.served == 1
    assert not [key async for key in redis.scan_iter(match="*voice-encode:*")], "the recording's samples are not kept"
    listed = {v["name"]: v for v in (await client.get("/v1/voices")).json()["voices"]}
    assert listed["cloned"]["prompt"] is None, "lists leave the long prompt out"
    task = (await client.post("/v1/tts/submit", json={"text": "你好", "voice": "cloned"})).json()
    job = await JobQueue(redis, queue_config()).get(task["task_id"])
    assert job is not None and job.params.speaker_prompt == voice["prompt"] and job.params.prompt_text == TRANSCRIPT
    assert job.params.speaker_seed is None and job.params.speaker_embedding is None
    assert (await client.delete("/v1/voices/cloned")).status_code == 204
    assert (await client.get("/v1/voices/cloned")).status_code == 404


async def test_a_voice_from_a_recording_speaks_on_the_openai_route_through_a_real_worker(
    client: httpx.AsyncClient, redis: Redis, worker_encoder: VoiceEncoderLoop, tiny_decoder_engine: DecoderEngine
) -> None:
    created = await client.post("/v1/voices", json=body("cloned-openai", audio_file(4.0)))
    assert created.status_code == 201, created.text
    async with running_worker(redis, tiny_decoder_engine):
        spoken = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "你好", "voice": "cloned-openai"})
        assert spoken.status_code == 200, spoken.text
    assert spoken.content, "the audio itself"
    job = await JobQueue(redis, queue_config()).get(spoken.headers["x-ttsq-task-id"])
    assert job is not None and job.params.speaker_prompt == created.json()["prompt"] and job.params.prompt_text == TRANSCRIPT


@pytest.mark.parametrize(
    ("make", "transcript", "field", "problem"),
    [
        (lambda: audio_file(2.0), TRANSCRIPT, "audio", "at least 3 s"),
        (lambda: audio_file(31.0, rate=16_000), TRANSCRIPT * 5, "audio", "at most 30 s"),
        (lambda: audio_file(5.0, amplitude=0.0), TRANSCRIPT, "audio", "silent"),
        (lambda: b"RIFF this is not audio at all" * 10, TRANSCRIPT, "audio", "not decodable"),
        (lambda: wav(1, 120_000), TRANSCRIPT, "audio", "sample rate of 1 Hz"),
        (lambda: long_flac(3_600), TRANSCRIPT, "audio", "longer than 30 s"),
        (lambda: audio_file(5.0), "   ", "transcript", "empty"),
        (lambda: audio_file(5.0), "嗯", "transcript", "implausible"),
        (lambda: audio_file(3.0), "x" * 200, "transcript", "implausible"),
    ],
    ids=[
        "too-short",
        "too-long",
        "silent",
        "not-audio",
        "1-hz-header",
        "hour-of-flac",
        "empty-transcript",
        "transcript-too-short",
        "transcript-too-long",
    ],
)
async def test_bad_recordings_and_transcripts_get_a_422_naming_the_problem_and_nothing_is_stored(
    client: httpx.AsyncClient, make: Any, transcript: str, field: str, problem: str
) -> None:
    answer = await client.post("/v1/voices", json=body("bad", make(), transcript))
    assert answer.status_code == 422, answer.text
    error = answer.json()["detail"][0]
    assert error["loc"][-1] == field and problem in error["msg"], error
    assert (await client.get("/v1/voices/bad")).status_code == 404


async def test_audio_without_a_transcript_or_beside_a_seed_is_refused(client: httpx.AsyncClient) -> None:
    encoded = base64.b64encode(audio_file(4.0)).decode()
    missing = await client.post("/v1/voices", json={"name": "half", "audio": encoded})
    assert missing.status_code == 422 and "transcript" in missing.text
    both = await client.post("/v1/voices", json={"name": "both", "seed": 3, "audio": encoded, "transcript": TRANSCRIPT})
    assert both.status_code == 422 and "exactly one of seed or embedding" in both.text
    garbled = await client.post("/v1/voices", json={"name": "b64", "audio": "not base64!!", "transcript": TRANSCRIPT})
    assert garbled.status_code == 422 and "base64" in garbled.text
    beyond_ascii = await client.post("/v1/voices", json={"name": "b64", "audio": "Ê5é", "transcript": TRANSCRIPT})
    assert beyond_ascii.status_code == 422 and "base64" in beyond_ascii.text, "found by the fuzzer: it was a 500"


async def test_without_a_worker_the_request_times_out_with_a_503_and_nothing_is_stored(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(voice_encode_timeout_s=0.3)) as (client, _):
        answer = await client.post("/v1/voices", json=body("orphan", audio_file(4.0)))
        assert answer.status_code == 503 and "nothing was stored" in answer.text
        assert (await client.get("/v1/voices/orphan")).status_code == 404
    await asyncio.sleep(0)
    assert not [key async for key in redis.scan_iter(match="*voice-encode:*")]


async def test_a_recording_larger_than_the_default_body_limit_is_accepted_on_this_route_only(
    client: httpx.AsyncClient, worker_encoder: VoiceEncoderLoop
) -> None:
    recording = audio_file(6.0)  # ~2 MB of 44.1 kHz stereo WAV, far past MAX_BODY_BYTES (64 KiB)
    assert len(recording) > 65_536 * 4
    created = await client.post("/v1/voices", json=body("big", recording))
    assert created.status_code == 201, created.text
    too_big = await client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "x" * 70_000})
    assert too_big.status_code == 413


async def test_a_voice_body_over_its_limit_is_a_413_naming_that_limit_as_json_and_as_a_form(make_settings: Any) -> None:
    """Found by a tester: a multipart upload over the limit escaped the form reader as a 500 (and an ERROR
    traceback), and the JSON route's 413 named ``MAX_BODY_BYTES``, a setting that does not govern this route."""
    recording = audio_file(2.0)
    async with api_client(make_settings(max_voice_body_bytes=100_000)) as (client, _):
        as_json = await client.post("/v1/voices", json=body("big", recording))
        files = {"audio": ("big.wav", recording, "audio/wav")}
        as_form = await client.post("/v1/voices", data={"name": "big", "transcript": TRANSCRIPT}, files=files)
    for answer in (as_json, as_form):
        assert answer.status_code == 413, answer.text
        assert "MAX_VOICE_BODY_BYTES" in answer.text and "100000 bytes" in answer.text
