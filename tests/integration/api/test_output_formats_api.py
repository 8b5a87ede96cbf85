"""Output formats on the routes: `/v1/tts/stream` and `/v1/tts/result` take `format` (mulaw and alaw too) and
`sample_rate`; the OpenAI route takes `sample_rate` beside `response_format`; a stored or cached result is never
answered in a format or at a rate other than its own without being converted."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.runtime.test_worker import running_worker, worker_config
from ttsq.domain.converter import convert_whole, converter
from ttsq.domain.encoders import decode_pcm16
from ttsq.domain.output_formats import OutputFormat, parse_ttsq
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.runtime.worker import Worker
from ttsq.store.cache import ResultCache
from ttsq.store.queue import JobQueue

TEXT = "First sentence here. Second one follows."


def streamed_at_once(pcm: bytes, fmt: OutputFormat) -> bytes:
    """What a stream of ``pcm`` in ``fmt`` must be: the converter's bytes (the same for any cut of ``pcm``:
    tests/unit/domain/test_converter.py)."""
    conv = converter(fmt)
    return conv.start() + conv.feed(pcm) + conv.end()


async def test_stream_and_result_in_telephony_and_resampled_formats(
    redis: Redis, tiny_engine: ChatTTSEngine, make_settings: Any
) -> None:
    async with api_client(make_settings()) as (client, _), running_worker(redis, tiny_engine):
        task = (await client.post("/v1/tts/submit", json={"text": TEXT, "seed": 7, "format": "pcm"})).json()["task_id"]
        pcm = (await client.get(f"/v1/tts/stream/{task}?format=pcm")).content  # followed to the end, as it is made
        assert len(pcm) > 24_000
        stored = await client.get(f"/v1/tts/result/{task}")
        assert stored.content == pcm

        for query, fmt in [
            ("format=mulaw", OutputFormat("pcm_mulaw", 8_000)),
            ("format=alaw", OutputFormat("pcm_alaw", 8_000)),
            ("format=mulaw&sample_rate=16000", OutputFormat("pcm_mulaw", 16_000)),
            ("format=pcm&sample_rate=16000", OutputFormat("pcm_s16le", 16_000)),
            ("format=wav&sample_rate=8000", OutputFormat("pcm_s16le", 8_000, wav=True)),
            ("format=mp3&sample_rate=44100", OutputFormat("mp3", 44_100)),
            ("format=flac&sample_rate=22050", OutputFormat("flac", 22_050)),
        ]:
            stream = await client.get(f"/v1/tts/stream/{task}?{query}")
            assert stream.status_code == 200, (query, stream.text)
            assert stream.headers["content-type"] == fmt.content_type
            assert stream.content == streamed_at_once(pcm, fmt), query
            result = await client.get(f"/v1/tts/result/{task}?{query}")
            assert result.status_code == 200 and result.headers["content-type"] == fmt.content_type
            assert result.content == convert_whole(pcm, fmt), query
            assert result.headers["content-disposition"].endswith(f'.{fmt.extension}"')
        assert (await client.get(f"/v1/tts/stream/{task}?format=mulaw")).headers["content-type"] == "audio/basic"
        opus = await client.get(f"/v1/tts/stream/{task}?format=opus&sample_rate=48000")
        fmt = OutputFormat("opus", 48_000)
        assert np.array_equal(
            np.frombuffer(decode_pcm16(opus.content, 48_000), "<i2"),
            np.frombuffer(decode_pcm16(streamed_at_once(pcm, fmt), 48_000), "<i2"),
        ), "Ogg pages may end elsewhere; the audio is the same"

        resampled = await client.get(f"/v1/tts/result/{task}?sample_rate=8000")  # the stored format (pcm), resampled
        assert resampled.content == convert_whole(pcm, parse_ttsq("pcm", 8_000))
        sized = await client.get(f"/v1/tts/result/{task}?format=wav&sample_rate=8000")
        with wave.open(io.BytesIO(sized.content)) as reader:
            assert (reader.getframerate(), reader.getnframes()) == (8_000, -(-len(pcm) // 2 // 3)), "a finished file's sizes"


async def test_a_format_and_rate_ttsq_cannot_make_is_a_422_naming_them(client: Any) -> None:
    """Checked before the task is even looked up: the answer names the pair and what can be made."""
    task = (await client.post("/v1/tts/submit", json={"text": "hello", "seed": 3})).json()["task_id"]
    for path in ("stream", "result"):
        refused = await client.get(f"/v1/tts/{path}/{task}?format=opus&sample_rate=44100")
        assert refused.status_code == 422, path
        detail = refused.json()["detail"][0]
        assert detail["loc"] == ["query", "sample_rate"]
        assert "opus at 44100 Hz is not supported; opus is made at 8000, 12000, 16000, 24000, 48000 Hz" in detail["msg"]
    odd = await client.get(f"/v1/tts/stream/{task}?format=pcm&sample_rate=7000")
    assert odd.status_code == 422 and "pcm_s16le at 7000 Hz is not supported" in odd.json()["detail"][0]["msg"]
    unknown = await client.get(f"/v1/tts/stream/{task}?format=ulaw")
    assert unknown.status_code == 422 and "mulaw" in unknown.text, "the names ttsq takes are listed"
    captions = await client.get(f"/v1/tts/result/{task}?format=srt&sample_rate=8000")
    assert captions.status_code == 422 and "captions (srt) have no sample rate" in captions.text


async def test_openai_sample_rate_and_a_cached_result_answered_only_in_its_own_format(
    redis: Redis, tiny_engine: ChatTTSEngine, make_settings: Any
) -> None:
    """The first request is synthesised and streamed at 16 kHz; the task stores 24 kHz PCM (so the cache keeps it).
    The same text and voice at 24 kHz, as a WAV at 8 kHz and as mp3 at 44.1 kHz are cache hits, each answered in its
    own format and rate, made from the one entry: never the entry's bytes as they are."""
    speech = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm"}
    async with api_client(make_settings()) as (client, _), caching_worker(redis, tiny_engine, make_settings()):
        first = await client.post("/v1/audio/speech", json={**speech, "sample_rate": 16_000})
        assert first.status_code == 200 and first.headers["content-type"] == "audio/pcm"
        assert "x-ttsq-ignored-fields" not in first.headers, "sample_rate is a field of ttsq's, not an unknown one"
        native = await client.post("/v1/audio/speech", json=speech)
        wav = await client.post("/v1/audio/speech", json={**speech, "response_format": "wav", "sample_rate": 8_000})
        mp3 = await client.post("/v1/audio/speech", json={**speech, "response_format": "mp3", "sample_rate": 44_100})
        sse = await client.post("/v1/audio/speech", json={**speech, "sample_rate": 16_000, "stream_format": "sse"})
        attempts = [
            (await client.get(f"/v1/tts/tasks/{answer.headers['x-ttsq-task-id']}")).json()["attempts"]
            for answer in (first, native, wav, mp3)
        ]
    assert attempts[0] == 1 and attempts[1:] == [0, 0, 0], "synthesised once, then answered from the cache"
    pcm = native.content
    assert first.content == convert_whole(pcm, OutputFormat("pcm_s16le", 16_000))
    assert len(first.content) == -(-len(pcm) // 2 * 2 // 3) * 2
    assert wav.content == convert_whole(pcm, OutputFormat("pcm_s16le", 8_000, wav=True))
    assert mp3.headers["content-type"] == "audio/mpeg" and mp3.content == convert_whole(pcm, OutputFormat("mp3", 44_100))
    assert convert_whole(pcm, OutputFormat("pcm_s16le", 16_000)) == _sse_audio(sse.text)


@asynccontextmanager
async def caching_worker(redis: Redis, engine: ChatTTSEngine, config: Any) -> AsyncIterator[Worker]:
    """A real worker that stores its results in the result cache too, as ``worker.py`` does."""
    worker = Worker(JobQueue(redis, queue_config(block_s=0.2)), engine, worker_config(), ResultCache(redis, config.cache_config()))
    running = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 30)


def _sse_audio(text: str) -> bytes:
    deltas = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    return b"".join(base64.b64decode(event["audio"]) for event in deltas if event["type"] == "speech.audio.delta")


async def test_openai_refuses_a_sample_rate_its_format_cannot_have(client: Any) -> None:
    speech = {"model": "tts-1", "input": "hello", "voice": "alloy"}
    refused = await client.post("/v1/audio/speech", json={**speech, "response_format": "opus", "sample_rate": 44_100})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "sample_rate" and "opus at 44100 Hz is not supported" in error["message"]
    as_text = await client.post("/v1/audio/speech", json={**speech, "sample_rate": "16000"})
    assert as_text.status_code == 400 and as_text.json()["error"]["param"] == "sample_rate"
