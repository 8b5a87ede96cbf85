"""The OpenAI-compatible endpoint driven by the official ``openai`` Python package, against real processes."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
import wave
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from openai.types.audio import Voice

from tests.conftest import queue_config, settings
from tests.support.service import Service, Worker, wait_for
from ttsq.domain.audio import SAMPLE_RATE, encode_audio
from ttsq.domain.encoders import StreamFormat, decode_pcm16, stream_encoder
from ttsq.domain.sampling import speed_level
from ttsq.store.connection import create_redis
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

pytestmark = pytest.mark.e2e


def client_for(service: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{service.api_url}/v1", api_key="not-needed", max_retries=0, timeout=120)


def test_openai_sdk_speech_in_every_supported_format(service: Service) -> None:
    service.start_worker("openai")
    client = client_for(service)
    for fmt in ("wav", "mp3", "flac", "opus", "aac"):
        audio = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello from the OpenAI SDK.", response_format=fmt)
        assert len(decode_pcm16(audio.content, SAMPLE_RATE)) > 0, fmt  # libav reads them all (libsndfile: not ADTS)
        if fmt == "aac":
            assert audio.response.headers["content-type"] == "audio/aac" and audio.content[:2] == b"\xff\xf1", "ADTS"
        if fmt == "wav":  # the finished file, its sizes stated: Python's wave module reads it as it is
            with wave.open(io.BytesIO(audio.content)) as riff:
                assert riff.getnframes() * 2 == len(audio.content) - 44 and riff.getframerate() == SAMPLE_RATE
    pcm = client.audio.speech.create(model="gpt-4o-mini-tts", voice="nova", input="Raw samples please.", response_format="pcm")
    assert len(pcm.content) > 0 and len(pcm.content) % 2 == 0
    assert "X-TTSQ-Ignored-Fields" not in pcm.response.headers
    newer = client.audio.speech.create(
        model="tts-1", voice="nova", input="Raw samples please.", response_format="pcm", extra_body={"emotion": 2, "x y": 1}
    )
    assert newer.content == pcm.content, "a field OpenAI added later is ignored..."
    assert newer.response.headers["X-TTSQ-Ignored-Fields"] == "(unnamed), emotion", "...and said to be"


def test_openai_sdk_streaming_equals_the_whole_response(service: Service) -> None:
    service.start_worker("openai-stream")
    client = client_for(service)
    text = "First sentence streams early. The second one follows. And a third."
    chunks: list[bytes] = []
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="echo", input=text, response_format="pcm"
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        chunks.extend(response.iter_bytes())
    whole = client.audio.speech.create(model="tts-1", voice="echo", input=text, response_format="pcm")
    assert b"".join(chunks) == whole.content
    with httpx.stream(
        "POST",
        f"{service.api_url}/v1/audio/speech",
        json={"model": "tts-1", "voice": "echo", "input": text, "response_format": "pcm", "stream_format": "sse"},
    ) as sse:
        events = [json.loads(line[5:]) for line in sse.iter_lines() if line.startswith("data:")]
    assert events[-1] == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": len(text), "output_tokens": 0, "total_tokens": len(text)},
    }, "OpenAI's shape: LiveKit's plugin reads usage as an object (null failed its stream)"
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == whole.content


def in_flight(worker: Worker) -> float:
    """The worker's ``ttsq_jobs_in_flight`` gauge: jobs it claimed and has not finished."""
    line = next(line for line in worker.get("/metrics").text.splitlines() if line.startswith("ttsq_jobs_in_flight "))
    return float(line.split()[1])


def test_a_stream_whose_client_went_away_cancels_its_job_and_frees_the_worker(service: Service) -> None:
    """A 3,000-character ``with_streaming_response`` request closed after its first bytes used to leave
    its job running, holding the worker. Its request was the job's only listener, so the job is cancelled; the worker
    stops its rows at its next lease renewal. Long chunks (400 tokens each) keep the job running well past the close."""
    worker = service.start_worker("openai-gone", MIN_NEW_TOKEN="400", MAX_NEW_TOKEN="400")
    text = " ".join(f"Sentence number {index} is read aloud here." for index in range(80))[:3000]
    assert len(text) == 3000
    with client_for(service).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm"
    ) as response:
        task_id = response.headers["x-ttsq-task-id"]
        assert next(response.iter_bytes()), "the first audio came"
    final = service.wait_status(task_id, {"cancelled", "done", "failed"}, 120)
    assert final["status"] == "cancelled", final
    wait_for(lambda: in_flight(worker) == 0, 60, "the worker to hold no job")
    again = client_for(service).audio.speech.create(model="tts-1", voice="alloy", input="Free again.", response_format="pcm")
    assert len(again.content) > 0, "the worker claims again"
    assert "its only listener went away: cancelling" in service.log("api").decode(), "the API cancelled it, running"


def test_a_closed_sse_stream_cancels_its_job_unless_a_submit_joined_it(service: Service) -> None:
    """The SSE form goes the same way; and a job someone else asked for meanwhile (here a native submit of the same
    request, which single-flight joins to it) is left to finish for them when the stream that queued it closes."""
    service.start_worker("openai-sse-gone", MIN_NEW_TOKEN="400", MAX_NEW_TOKEN="400")

    def first_event_then_close(text: str, join: bool) -> str:
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", "stream_format": "sse"}
        with httpx.stream("POST", f"{service.api_url}/v1/audio/speech", json=body, timeout=120) as sse:
            task_id = sse.headers["x-ttsq-task-id"]
            if join:
                joined = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": text, "voice": "zh_female", "format": "pcm"})
                assert joined.json()["joined"] is True and joined.json()["task_id"] == task_id, joined.text
            assert next(line for line in sse.iter_lines() if line.startswith("data:")), "the first audio came"
        return task_id

    alone = first_event_then_close(" ".join(f"Line {index} of a long reading." for index in range(40)), join=False)
    assert service.wait_status(alone, {"cancelled", "done", "failed"}, 120)["status"] == "cancelled"
    shared = first_event_then_close("A shorter text. Another submit wants it too. So it is finished.", join=True)
    assert service.wait_status(shared, {"cancelled", "done", "failed"}, 120)["status"] == "done"
    assert f"task {shared}: its only listener went away: kept" in service.log("api").decode()


def test_openai_sdk_errors(service: Service) -> None:
    client = client_for(service)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"voice": "nobody"}, "voice"),
        ({"response_format": "ogg"}, "response_format"),
        ({"speed": 5.0}, "speed"),
        ({"input": ""}, "input"),
        ({"input": "a" * 4097}, "input"),
        ({"input": "[Stts] hi"}, "[Stts]"),
    ]
    for change, words in cases:
        request: dict[str, Any] = {"model": "tts-1", "voice": "alloy", "input": "hi", "response_format": "mp3", **change}
        with pytest.raises(openai.BadRequestError) as caught:
            client.audio.speech.create(**request)
        assert words in str(caught.value), (change, str(caught.value))


def test_openai_voices_are_listed(service: Service) -> None:
    listed = httpx.get(f"{service.api_url}/v1/audio/voices").json()["voices"]
    names = {v["voice_id"] for v in listed}
    assert {"alloy", "echo", "fable", "onyx", "nova", "shimmer", "zh_female"} <= names


class VoiceList(openai.BaseModel):
    object: str
    data: list[Voice]


def test_openai_voices_are_openai_voice_objects(service: Service) -> None:
    """Read with the SDK's own ``Voice`` model (the SDK has no list method: its generic ``get``)."""
    listing = client_for(service).get("/audio/voices", cast_to=VoiceList)
    assert listing.object == "list"
    voices = {voice.id: voice for voice in listing.data}
    assert {"alloy", "nova", "zh_female", "zh_male"} <= set(voices)
    assert all(voice.object == "audio.voice" and voice.name == voice.id for voice in listing.data)
    assert voices["zh_female"].type == "builtin" and isinstance(voices["alloy"].created_at, int)  # type: ignore[comparison-overlap]


def test_openai_input_up_to_4096_characters_is_split_and_spoken(service: Service) -> None:
    """OpenAI's limit, not MAX_TEXT_CHARS (500 here): the text is synthesised in sentence chunks like any long one."""
    service.start_worker("openai-long")
    sentence = "This sentence is one of many. "
    text = (sentence * (4096 // len(sentence) + 1))[:4096]
    with client_for(service).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm"
    ) as response:
        task = response.headers["x-ttsq-task-id"]
        pcm = b"".join(response.iter_bytes())
    status = service.status(task)
    assert status["status"] == "done" and status["chunks_total"] >= 4096 // 40, "MAX_CHUNK_CHARS=40 chunks"
    assert len(pcm) // 2 == round(status["audio_duration_s"] * SAMPLE_RATE)


def header_bytes(fmt: StreamFormat) -> int:
    """Bytes an encoder sends before any audio (the file's header)."""
    return len(stream_encoder(fmt, SAMPLE_RATE).start())


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_openai_sdk_streams_compressed_audio_while_the_job_runs(service: Service, fmt: StreamFormat) -> None:
    """No worker: the test holds the job itself, so the first audio provably reaches the SDK while the job runs.

    The SDK's ``with_streaming_response`` reads in a thread; the test claims the job, publishes one sentence's
    PCM as a worker does, waits for the SDK to have audio bytes (past the header), checks the job is still
    running, then publishes the rest and completes it. The joined body decodes to the samples published
    (opus, flac exactly; mp3 but its end padding; aac but its priming and padding)."""
    pieces = [(np.sin(np.arange(n) * 0.03) * 6000).astype("<i2").tobytes() for n in (24_000, 30_000)]
    got_audio, body, errors = threading.Event(), bytearray(), []

    def listen() -> None:
        try:
            with client_for(service).audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input="Two sentences. Held by the test.", response_format=fmt
            ) as response:
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > header_bytes(fmt):
                        got_audio.set()
        except (openai.APIError, httpx.HTTPError) as exc:  # reported to the test's thread
            errors.append(exc)
            got_audio.set()

    async def act_as_worker() -> None:
        redis = create_redis(settings(redis_url=service.env["REDIS_URL"]).redis_config())
        queue = JobQueue(redis, queue_config(redis_url=service.env["REDIS_URL"]))
        streams = AudioStreams(redis, queue.shards, 3600)
        held = None
        while held is None:
            held = await queue.leases.claim("test-worker", block_s=0.5)
        assert await streams.publish(held.job.id, held.token, 0, 2, pieces[0], fresh=True)
        assert await asyncio.to_thread(got_audio.wait, 60) and not errors, errors
        job = await queue.get(held.job.id)
        assert job is not None and job.status.value == "running", "the first audio came while the job ran"
        assert await streams.publish(held.job.id, held.token, 1, 2, pieces[1])
        samples = np.frombuffer(b"".join(pieces), dtype="<i2").astype(np.float32) / 32768
        stored = encode_audio(samples, fmt)
        await queue.leases.complete(held.job, stored, "audio/x", len(samples) / SAMPLE_RATE, 0.1, cache_key=None)
        await redis.aclose()

    listener = threading.Thread(target=listen)
    listener.start()
    asyncio.run(act_as_worker())
    listener.join(60)
    assert not errors, errors
    fed = sum(len(piece) for piece in pieces) // 2
    excess = len(decode_pcm16(bytes(body), SAMPLE_RATE)) // 2 - fed
    assert {"opus": excess == 0, "flac": excess == 0, "mp3": 0 <= excess < 576 + 64, "aac": 1024 <= excess < 2048}[fmt], excess


def test_openai_sdk_streams_mp3_and_opus_from_a_real_worker(service: Service) -> None:
    """With the real worker: several pieces come, the body is one file the length of the stored result (opus
    exactly, mp3 but its end padding), and the SSE deltas are those pieces, not one at the end."""
    service.start_worker("openai-formats")
    client = client_for(service)
    text = "First sentence streams early. The second one follows. And a third one ends it."
    formats: tuple[StreamFormat, ...] = ("mp3", "opus")
    for fmt in formats:
        chunks: list[bytes] = []
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="echo", input=text, response_format=fmt
        ) as response:
            task = response.headers["x-ttsq-task-id"]
            chunks.extend(response.iter_bytes())
        stored = httpx.get(f"{service.api_url}/v1/tts/result/{task}").content
        stored_samples = len(sf.read(io.BytesIO(stored))[0])
        excess = len(decode_pcm16(b"".join(chunks), SAMPLE_RATE)) // 2 - stored_samples
        assert excess == 0 if fmt == "opus" else 0 <= excess < 576 + 64, (fmt, excess)
        with httpx.stream(
            "POST",
            f"{service.api_url}/v1/audio/speech",
            json={"model": "tts-1", "voice": "echo", "input": text + " Again.", "response_format": fmt, "stream_format": "sse"},
            timeout=120,
        ) as sse:
            events = [json.loads(line[5:]) for line in sse.iter_lines() if line.startswith("data:")]
        deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
        assert events[-1]["type"] == "speech.audio.done" and len(deltas) >= 3, "the header, then the audio as it comes"
        assert len(decode_pcm16(b"".join(deltas), SAMPLE_RATE)) > 0


def test_speed_mapping() -> None:
    """One rule for every protocol's speed factor (OpenAI's speed, Cartesia's generation_config.speed, Google's
    speakingRate): each doubling two of ChatTTS's steps from 5, clamped."""
    assert [speed_level(s) for s in (0.1, 0.25, 0.5, 0.6, 1.0, 1.5, 2.0, 4.0)] == [1, 1, 3, 4, 5, 6, 7, 9]
