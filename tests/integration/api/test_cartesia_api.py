"""Cartesia's ``POST /tts/bytes`` against the real app (lifespan included) on a real Redis, as Cartesia's clients send
it: what each option becomes, the audio it answers with, and every refusal in Cartesia's error shape.

No worker: the test plays it through the queue's own calls (claim, publish, complete), as tests/unit/store/test_listener.py
does; the stock clients against a real worker are tests/e2e/test_cartesia_clients.py.
"""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_realtime_session import served
from tests.integration.api.test_security import new_key
from ttsq.api.cartesia import IGNORED_OPTIONS
from ttsq.api.service import TTSService
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.converter import converter
from ttsq.domain.jobs import Job
from ttsq.domain.output_formats import OutputFormat, parse_cartesia
from ttsq.store.cache import CachedAudio
from ttsq.store.leases import Claim
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

GUARD_S = 60.0
"""Only a hang reaches it."""
ROOT = Path(__file__).resolve().parents[3]
RAW_24K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
LIVEKIT_DEFAULT_VOICE = "f786b574-daa5-4673-aa0c-cbe3e8534c02"
"""A Cartesia voice id (LiveKit's plugin's default): it names no ttsq voice."""
PIECES = [b"\x01\x00" * 2400, b"\x02\x00" * 4800]
"""Two pieces of PCM16 a worker would publish (0.1 s and 0.2 s)."""


def generation(**overrides: Any) -> dict[str, Any]:
    """A ``/tts/bytes`` body as LiveKit's Cartesia plugin sends it (protocols.md §3.5), for a ttsq voice."""
    body: dict[str, Any] = {
        "model_id": "sonic-3",
        "voice": {"mode": "id", "id": "alloy"},
        "output_format": RAW_24K,
        "language": "en",
        "transcript": "Hello from a Cartesia client.",
    }
    body.update(overrides)
    return body


def cartesia_headers(key: str | None, version: str = "2025-04-16") -> dict[str, str]:
    headers = {"Cartesia-Version": version}
    if key is not None:
        headers["X-API-Key"] = key
    return headers


@asynccontextmanager
async def keyed(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with api_client(make_settings(auth="on", **overrides)) as (client, app):
        yield client, app


async def claimed_when_queued(queue: JobQueue) -> Claim:
    """The next job, claimed as soon as one is queued (the request that queues it may not have yet)."""
    while (claim := await queue.leases.claim("w", block_s=0.1)) is None:
        pass
    return claim


async def play_worker(redis: Redis, pieces: list[bytes] = PIECES) -> Job:
    """Claim the one queued job, publish ``pieces`` as its audio and complete it with them (a raw PCM result)."""
    queue = JobQueue(redis, queue_config())
    streams = AudioStreams(redis, queue.shards, 60)
    held = await claimed_when_queued(queue)
    for index, pcm in enumerate(pieces):
        assert await streams.publish(held.job.id, held.token, index, len(pieces), pcm)
    joined = b"".join(pieces)
    await queue.leases.complete(held.job, joined, "audio/pcm", len(joined) / 2 / SAMPLE_RATE, 0.1, cache_key=None)
    return held.job


def assert_cartesia_error(answer: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    """Cartesia's HTTP error object (``error_code``, ``title``, ``message``, ``request_id``), and ttsq's ``param``."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    body: dict[str, Any] = answer.json()
    assert {"error_code", "title", "message", "request_id"} <= set(body), body
    assert body["message"] and body["title"] and body["request_id"], body
    if param is not None:
        assert body["param"] == param, body
    return body


async def test_bytes_answers_the_task_audio_with_the_voice_and_speed_it_asked_for(redis: Redis, make_settings: Any) -> None:
    """LiveKit's body: ``voice.id`` is an OpenAI name (the built-in voice it maps onto), ``generation_config.speed``
    1.5 is ChatTTS's speed 6 by the factor rule, the transcript is the job's text, and the audio is what the worker
    published, raw. ``model_id`` and ``language`` are accepted and named as ignored; so is a field Cartesia adds."""
    async with keyed(make_settings) as (client, _app):
        key = await new_key(redis, "tts")
        body = generation(generation_config={"speed": 1.5, "emotion": "positivity"}, brand_new_option=True)
        asking = asyncio.create_task(client.post("/tts/bytes", json=body, headers=cartesia_headers(key)))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert answer.status_code == 200, answer.text
    assert answer.content == b"".join(PIECES)
    assert answer.headers["content-type"] == "audio/pcm"
    assert answer.headers["x-ttsq-task-id"] == job.id
    ignored = answer.headers["x-ttsq-ignored-fields"].split(", ")
    assert ignored == sorted(["brand_new_option", "generation_config.emotion", "language", "model_id"]), ignored
    params = job.params
    assert (params.text, params.voice, params.speed, params.format) == ("Hello from a Cartesia client.", "zh_female", 6, "pcm")


@pytest.mark.parametrize(
    ("speed", "level"),
    [
        ({"generation_config": {"speed": 0.6}}, 4),
        ({"generation_config": {"speed": 1.0}}, 5),
        ({"speed": "fast"}, 7),
        ({"speed": "slow"}, 3),
        ({"voice": {"mode": "id", "id": "alloy", "__experimental_controls": {"speed": "fastest"}}}, 9),
        ({"voice": {"mode": "id", "id": "alloy", "__experimental_controls": {"speed": -1.0}}}, 1),
        ({"voice": {"mode": "id", "id": "alloy", "__experimental_controls": {"speed": 0.5}}}, 7),
        ({}, 5),
    ],
)
async def test_each_way_cartesia_says_speed_is_chattts_speed(
    redis: Redis, make_settings: Any, speed: dict[str, Any], level: int
) -> None:
    async with api_client(make_settings()) as (client, _app):
        asking = asyncio.create_task(client.post("/tts/bytes", json=generation(**speed)))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        assert (await asyncio.wait_for(asking, GUARD_S)).status_code == 200
    assert job.params.speed == level


async def test_the_sdk_shape_a_bearer_key_and_a_bare_voice_id(redis: Redis, make_settings: Any) -> None:
    """The ``cartesia`` SDK sends ``Authorization: Bearer`` (no ``X-API-Key``), ``cartesia-version`` lower-cased and the
    voice as its id alone; a ttsq voice name works as an id."""
    async with keyed(make_settings) as (client, _app):
        key = await new_key(redis, "tts")
        body = {"model_id": "sonic-latest", "transcript": "From the SDK.", "voice": "zh_male", "output_format": RAW_24K}
        headers = {"Authorization": f"Bearer {key}", "cartesia-version": "2026-08-14", "Accept": "audio/wav"}
        asking = asyncio.create_task(client.post("/tts/bytes", json=body, headers=headers))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert answer.status_code == 200 and answer.content == b"".join(PIECES), answer.text
    assert job.params.voice == "zh_male"


async def test_wav_is_the_finished_file_whose_header_states_its_sizes(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _app):
        body = generation(output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 24000})
        asking = asyncio.create_task(client.post("/tts/bytes", json=body))
        await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/wav", answer.text
    with wave.open(io.BytesIO(answer.content)) as read:
        assert (read.getframerate(), read.getnchannels(), read.getsampwidth()) == (SAMPLE_RATE, 1, 2)
        assert read.readframes(read.getnframes()) == b"".join(PIECES)


def streamed_as(fmt: OutputFormat, pieces: list[bytes] = PIECES) -> bytes:
    """What a converter into ``fmt`` makes of ``pieces`` fed one by one, as the route feeds a task's pieces."""
    convert = converter(fmt)
    return convert.start() + b"".join(convert.feed(piece) for piece in pieces) + convert.end()


@pytest.mark.parametrize(
    "output_format",
    [
        {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000},  # a phone bridge's
        {"container": "raw", "encoding": "pcm_alaw", "sample_rate": 8000},
        {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
        {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 44100},  # the SDK's default for a context
        {"container": "mp3", "sample_rate": 44100, "bit_rate": 128000},
    ],
)
async def test_every_cartesia_format_is_the_task_audio_converted_as_it_streams(
    redis: Redis, make_settings: Any, output_format: dict[str, Any]
) -> None:
    """The body is the task's pieces through the one converter (:mod:`ttsq.domain.converter`, which the formats' own
    tests hold to the audio resampled and encoded), fed as they came: the format asked, never another."""
    async with api_client(make_settings()) as (client, _app):
        asking = asyncio.create_task(client.post("/tts/bytes", json=generation(output_format=output_format)))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    fmt = parse_cartesia(output_format)
    assert answer.status_code == 200, answer.text
    assert answer.content == streamed_as(fmt)
    assert answer.headers["content-type"] == fmt.content_type
    assert job.params.format == "pcm", "the task keeps the PCM every format is made from"


async def test_a_cache_hit_is_answered_from_the_stored_audio(redis: Redis, make_settings: Any) -> None:
    """The same request again is the cache's (nothing queued, no worker needed): the same audio."""
    async with api_client(make_settings()) as (client, app):
        asking = asyncio.create_task(client.post("/tts/bytes", json=generation()))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        first = await asyncio.wait_for(asking, GUARD_S)
        joined = b"".join(PIECES)
        assert job.params.cache_key is not None
        stored = CachedAudio(joined, "audio/pcm", len(joined) / 2 / SAMPLE_RATE)
        await cast(TTSService, app.state.service).tasks.cache.put(job.params.cache_key, stored)  # as its worker does
        again = await asyncio.wait_for(client.post("/tts/bytes", json=generation()), GUARD_S)
        assert await JobQueue(redis, queue_config()).depth() == 0, "nothing was queued"
    assert first.status_code == again.status_code == 200
    assert again.content == first.content == b"".join(PIECES)
    assert again.headers["x-ttsq-task-id"] != first.headers["x-ttsq-task-id"]


async def test_keys_are_checked_as_everywhere_and_refused_in_cartesia_shape(redis: Redis, make_settings: Any) -> None:
    async with keyed(make_settings) as (client, _app):
        metrics_only = await new_key(redis, "metrics")
        missing = await client.post("/tts/bytes", json=generation(), headers=cartesia_headers(None))
        body = assert_cartesia_error(missing, 401)
        assert body["error_code"] == "unauthorized" and "needs an API key" in body["message"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await client.post("/tts/bytes", json=generation(), headers=cartesia_headers("ttsq_0123456789ab_" + "x" * 43))
        assert "not valid" in assert_cartesia_error(wrong, 401)["message"]
        scoped = await client.post("/tts/bytes", json=generation(), headers=cartesia_headers(metrics_only))
        assert assert_cartesia_error(scoped, 403)["error_code"] == "forbidden"
        not_json = await client.post("/tts/bytes", content=b"{}", headers={**cartesia_headers(None), "Content-Type": "text/plain"})
        assert assert_cartesia_error(not_json, 401)["error_code"] == "unauthorized", "the key first, the body after"
        assert await JobQueue(redis, queue_config()).depth() == 0, "nothing was queued"


@pytest.mark.parametrize(
    ("change", "param", "said"),
    [
        ({"voice": {"mode": "id", "id": LIVEKIT_DEFAULT_VOICE}}, "voice.id", "is not supported; use one of: alloy"),
        ({"voice": {"mode": "embedding", "embedding": [0.1, 0.2]}}, "voice.mode", "embeddings are not ttsq's"),
        ({"voice": {"mode": "id"}}, "voice.id", "needs an id"),
        ({"voice": ""}, "voice", "at least 1 character"),
        ({"output_format": {"container": "mp3", "sample_rate": 8000, "bit_rate": 192000}}, "output_format", "cannot be made"),
        ({"output_format": {"container": "raw", "sample_rate": 24000}}, "output_format", "encoding None is not supported"),
        ({"output_format": {"container": "raw", "encoding": "pcm_s24le", "sample_rate": 24000}}, "output_format.encoding", ""),
        ({"output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12345}}, "output_format.sample_rate", ""),
        ({"transcript": ""}, "transcript", "empty"),
        ({"transcript": "[Stts] a control token"}, "transcript", "control token"),
        ({"transcript": 42}, "transcript", "a string"),
        ({"generation_config": {"speed": 2.0}}, "generation_config.speed", "1.5"),
        ({"speed": "ludicrous"}, "speed", ""),
        ({"voice": {"mode": "id", "id": "alloy", "__experimental_controls": {"speed": 3}}}, "voice", ""),
    ],
)
async def test_what_ttsq_cannot_do_is_a_400_naming_the_field(
    redis: Redis, make_settings: Any, change: dict[str, Any], param: str, said: str
) -> None:
    async with api_client(make_settings()) as (client, _app):
        answer = await client.post("/tts/bytes", json=generation(**change), headers=cartesia_headers(None))
        body = assert_cartesia_error(answer, 400)
    assert body["error_code"] == "invalid_request"
    assert body["param"].startswith(param), body
    assert said in body["message"], body
    assert await JobQueue(redis, queue_config()).depth() == 0, "nothing was queued"


async def test_malformed_bodies_are_400s_naming_what(make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _app):
        missing = {key: value for key, value in generation().items() if key != "transcript"}
        assert "transcript" in assert_cartesia_error(await client.post("/tts/bytes", json=missing), 400)["message"]
        twice = b'{"transcript": "a", "transcript": "b"}'
        duplicated = await client.post("/tts/bytes", content=twice, headers={"Content-Type": "application/json"})
        assert "appears more than once" in assert_cartesia_error(duplicated, 400)["message"]
        broken = await client.post("/tts/bytes", content=b'{"transcript": ', headers={"Content-Type": "application/json"})
        assert assert_cartesia_error(broken, 400, "body")["message"].startswith("body: the request body is not JSON")
        plain = await client.post("/tts/bytes", content=b"{}", headers={"Content-Type": "text/plain"})
        assert "Content-Type must be application/json" in assert_cartesia_error(plain, 415)["message"]
        wrong_method = await client.get("/tts/bytes")
        assert assert_cartesia_error(wrong_method, 405)["error_code"] == "method_not_allowed"


async def test_a_task_that_fails_before_its_audio_is_a_500_in_cartesia_shape(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _app):
        asking = asyncio.create_task(client.post("/tts/bytes", json=generation()))
        queue = JobQueue(redis, queue_config())
        held = await asyncio.wait_for(claimed_when_queued(queue), GUARD_S)
        await queue.leases.fail(held.job, "the engine gave up", retryable=False, cache_key=None)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert "synthesis failed: the engine gave up" in assert_cartesia_error(answer, 500)["message"]


def test_every_ignored_option_is_named_in_the_protocol_page() -> None:
    page = (ROOT / "docs" / "protocols" / "cartesia.md").read_text(encoding="utf-8")
    missing = [name for name in IGNORED_OPTIONS if f"`{name}`" not in page]
    assert missing == [], f"docs/protocols/cartesia.md does not name: {missing}"


async def first_piece_published(redis: Redis) -> tuple[JobQueue, Claim]:
    """Claim the one queued job and publish its first piece (of two), as a worker does; the claim is returned."""
    queue = JobQueue(redis, queue_config())
    held = await claimed_when_queued(queue)
    assert await AudioStreams(redis, queue.shards, 60).publish(held.job.id, held.token, 0, 2, PIECES[0])
    return queue, held


async def test_a_task_that_fails_after_its_first_audio_breaks_the_body_off(redis: Redis, make_settings: Any) -> None:
    """Over a real uvicorn: the status and the first piece are sent; the task then fails, and the body ends without its
    last chunk (no clean end a client would take for the whole audio)."""
    async with served(make_settings()) as (ws_url, _app), httpx.AsyncClient(timeout=GUARD_S) as client:
        url = ws_url.replace("ws://", "http://").removesuffix("/v1/tts/realtime")
        working = asyncio.create_task(first_piece_published(redis))
        async with client.stream("POST", f"{url}/tts/bytes", json=generation()) as answer:
            queue, held = await working
            pieces = answer.aiter_bytes()
            assert answer.status_code == 200 and await anext(pieces) == PIECES[0]
            await queue.leases.fail(held.job, "the engine gave up", retryable=False, cache_key=None)
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in pieces:
                    pass


async def test_a_client_that_leaves_mid_stream_gives_its_task_up(redis: Redis, make_settings: Any) -> None:
    async with served(make_settings()) as (ws_url, _app), httpx.AsyncClient(timeout=GUARD_S) as client:
        url = ws_url.replace("ws://", "http://").removesuffix("/v1/tts/realtime")
        working = asyncio.create_task(first_piece_published(redis))
        async with client.stream("POST", f"{url}/tts/bytes", json=generation()) as answer:
            queue, held = await working
            assert await anext(answer.aiter_bytes()) == PIECES[0]
        async with asyncio.timeout(GUARD_S):  # the client has gone: its task is asked to stop
            while not (job := await queue.get(held.job.id)) or not job.cancel_requested:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
