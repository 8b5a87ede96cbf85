"""ElevenLabs' text-to-speech routes (``elevenlabs_api.py``) against the real app, in-process, on a real redis-server: what
maps to what, what is named as ignored, the formats, the answers' shapes, and every refusal in ElevenLabs' error body.

No worker: where a request needs audio, the test plays the worker through the queue's own calls (claim, publish,
complete or fail), as ``tests/integration/api/test_realtime_session.py`` does; the stock clients against a real worker are
``tests/e2e/test_elevenlabs_clients.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_security import new_key
from tests.support.redis_server import free_port
from ttsq.api.elevenlabs import (
    IGNORED_OPTIONS,
    OUTPUT_FORMAT_PATTERN,
    UnsupportedFormat,
    ignored_options,
    parse_output_format,
    sampling_seed,
)
from ttsq.domain.converter import convert_whole
from ttsq.domain.encoders import decode_pcm16
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, Job
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.leases import Claim
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

GUARD_S = 60.0
"""The longest any one wait of these tests may take."""

PIECES = [b"\x01\x02" * 2400, bytes(range(256)) * 400]  # 0.1 s, then 102,400 bytes: more than one timed line holds


@asynccontextmanager
async def app(make_settings: Any, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(make_settings(**overrides)) as (client, _):
        client.timeout = httpx.Timeout(GUARD_S)
        yield client


class PlayedWorker:
    """The worker's part, played through the queue: claim the next job, publish its pieces, then complete or fail it."""

    def __init__(self, redis: Redis) -> None:
        self.queue = JobQueue(redis, queue_config())
        self.streams = AudioStreams(redis, self.queue.shards, 60)

    async def run(self, pieces: list[bytes], *, fail: str | None = None) -> Job:
        held = await asyncio.wait_for(self._claim(), GUARD_S)
        for index, pcm in enumerate(pieces):
            assert await self.streams.publish(held.job.id, held.token, index, len(pieces), pcm)
        job = held.job.model_copy(update={"claim": held.token})
        if fail is not None:
            await self.queue.leases.fail(job, fail, retryable=False, cache_key=job.params.cache_key)
        else:
            joined = b"".join(pieces)
            await self.queue.leases.complete(job, joined, "audio/pcm", len(joined) / 48_000, 0.1, job.params.cache_key)
        return held.job

    async def _claim(self) -> Claim:
        while True:
            claim = await self.queue.leases.claim("w", block_s=0.1)
            if claim is not None:
                return claim


async def spoken(
    client: httpx.AsyncClient, worker: PlayedWorker, path: str, body: dict[str, Any], pieces: list[bytes] = PIECES, **kw: Any
) -> tuple[httpx.Response, Job]:
    """A request answered while the played worker makes its audio: the answer, and the job it queued."""
    answering = asyncio.create_task(client.post(path, json=body, **kw))
    job = await worker.run(pieces)
    return await asyncio.wait_for(answering, GUARD_S), job


async def test_the_audio_is_the_jobs_pcm_and_the_options_map_onto_ttsqs(redis: Redis, make_settings: Any) -> None:
    worker = PlayedWorker(redis)
    body = {
        "text": "Hello there. A second sentence.",
        "model_id": "eleven_turbo_v2_5",
        "voice_settings": {"stability": 0.5, "similarity_boost": 0.7, "speed": 2.0, "future_knob": 1},
        "seed": 2**32 - 5,
        "previous_text": None,
        "apply_text_normalization": "auto",
        "brand_new_field": True,
    }
    async with app(make_settings, cache_enabled=False) as client:
        path = "/v1/text-to-speech/alloy/stream?output_format=pcm_24000&enable_logging=true"
        answer, job = await spoken(client, worker, path, body)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "audio/pcm"
        assert answer.content == b"".join(PIECES)
        assert answer.headers["x-ttsq-task-id"] == job.id
        ignored = answer.headers["x-ttsq-ignored-fields"].split(", ")
        assert ignored == [
            "apply_text_normalization",
            "brand_new_field",
            "enable_logging",
            "model_id",
            "voice_settings.future_knob",
            "voice_settings.similarity_boost",
            "voice_settings.stability",
        ]
        params = job.params
        assert (params.voice, params.speed, params.seed, params.format) == ("zh_female", 7, 2**31 - 5, "pcm")  # alloy → zh_female
        assert params.text == body["text"]

        plain, job = await spoken(client, worker, "/v1/text-to-speech/zh_female", {"text": "No options at all."})
        assert plain.status_code == 200, plain.text
        assert "x-ttsq-ignored-fields" not in plain.headers
        assert (job.params.speed, job.params.seed, job.params.format) == (5, DEFAULT_SAMPLING_SEED, "pcm")
        assert job.params.deterministic, "a voice fixes the take: the same text and voice give the same audio"


async def test_every_format_is_the_jobs_audio_converted(redis: Redis, make_settings: Any) -> None:
    """The default (mp3_44100_128) and the other formats: the bytes of ttsq's converter fed the job's PCM whole (how it
    was split on the way does not matter); WAV from the plain route is the finished file, whose header states its sizes;
    /stream sends the open-ended one."""
    worker = PlayedWorker(redis)
    pcm = b"".join(PIECES)
    async with app(make_settings, cache_enabled=False) as client:
        answer, _ = await spoken(client, worker, "/v1/text-to-speech/zh_male", {"text": "Say it in MP3."})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "audio/mpeg"
        assert answer.content == convert_whole(pcm, parse_output_format("mp3_44100_128"))
        for name, content_type in (
            ("pcm_16000", "audio/pcm"),
            ("ulaw_8000", "audio/basic"),
            ("alaw_8000", "audio/x-alaw-basic"),
            ("pcm_44100", "audio/pcm"),
            ("wav_22050", "audio/wav"),
        ):
            path = f"/v1/text-to-speech/zh_male?output_format={name}"
            answer, _ = await spoken(client, worker, path, {"text": f"Say it in {name}."})
            assert answer.status_code == 200, (name, answer.text)
            assert answer.headers["content-type"] == content_type, name
            assert answer.content == convert_whole(pcm, parse_output_format(name)), name
        opus, _ = await spoken(client, worker, "/v1/text-to-speech/zh_male?output_format=opus_48000_64", {"text": "Opus."})
        assert opus.headers["content-type"] == "audio/ogg; codecs=opus"
        reference = convert_whole(pcm, parse_output_format("opus_48000_64"))
        assert decode_pcm16(opus.content, 48_000) == decode_pcm16(reference, 48_000), "the same packets (Ogg's serial is random)"
        streamed, _ = await spoken(client, worker, "/v1/text-to-speech/zh_male/stream?output_format=wav_16000", {"text": "WAV."})
        assert streamed.status_code == 200 and streamed.content[4:8] == b"\xff\xff\xff\xff", "open-ended, as streamed"
        whole = convert_whole(pcm, parse_output_format("wav_16000"))
        assert streamed.content[44:] == whole[44:], "the same samples after the header"


async def test_timed_answers_carry_the_audio_in_base64_and_null_alignment(redis: Redis, make_settings: Any) -> None:
    worker = PlayedWorker(redis)
    async with app(make_settings, cache_enabled=False) as client:
        path = "/v1/text-to-speech/zh_female/stream/with-timestamps?output_format=pcm_24000"
        lines, _ = await spoken(client, worker, path, {"text": "Timed, in lines."})
        assert lines.status_code == 200, lines.text
        assert lines.headers["content-type"] == "application/x-ndjson"
        chunks = [json.loads(line) for line in lines.text.splitlines()]
        assert all(set(c) == {"audio_base64", "alignment", "normalized_alignment"} for c in chunks), chunks[0].keys()
        assert all(c["alignment"] is None and c["normalized_alignment"] is None for c in chunks)
        audio = [base64.b64decode(c["audio_base64"]) for c in chunks]
        assert b"".join(audio) == b"".join(PIECES)
        assert max(len(line) for line in lines.text.splitlines()) < 128 * 1024, "aiohttp's line reader (Pipecat) takes it"
        assert len(audio) > len(PIECES), "the large piece was split over lines"

        path = "/v1/text-to-speech/zh_female/with-timestamps?output_format=pcm_24000"
        whole, _ = await spoken(client, worker, path, {"text": "Whole."})
        assert whole.status_code == 200, whole.text
        found = whole.json()
        assert base64.b64decode(found["audio_base64"]) == b"".join(PIECES)
        assert found["alignment"] is None and found["normalized_alignment"] is None

        path = "/v1/text-to-speech/zh_female/stream/with-timestamps?output_format=ulaw_8000"
        ulaw, _ = await spoken(client, worker, path, {"text": "Timed, for a phone."})
        audio = [base64.b64decode(json.loads(line)["audio_base64"]) for line in ulaw.text.splitlines()]
        assert b"".join(audio) == convert_whole(b"".join(PIECES), parse_output_format("ulaw_8000"))


async def test_a_cache_hit_is_answered_at_once_in_the_format_asked(redis: Redis, make_settings: Any) -> None:
    worker = PlayedWorker(redis)
    async with app(make_settings) as client:
        first, job = await spoken(client, worker, "/v1/text-to-speech/zh_female?output_format=pcm_24000", {"text": "Again."})
        assert first.status_code == 200
        assert job.params.cache_key is not None
        cache = ResultCache(redis, make_settings().cache_config())
        await cache.put(job.params.cache_key, CachedAudio(b"".join(PIECES), "audio/pcm", 1.0))
        again = await client.post("/v1/text-to-speech/zh_female/stream?output_format=pcm_24000", json={"text": "Again."})
        assert again.status_code == 200 and again.content == b"".join(PIECES)
        assert again.headers["x-ttsq-task-id"] != job.id, "a task of its own, answered from the cache (no worker ran it)"
        mp3 = await client.post("/v1/text-to-speech/zh_female/with-timestamps?output_format=mp3_44100_128", json={"text": "Again."})
        assert mp3.status_code == 200
        assert base64.b64decode(mp3.json()["audio_base64"]) == convert_whole(b"".join(PIECES), parse_output_format("mp3_44100_128"))
        wav = await client.post("/v1/text-to-speech/zh_female?output_format=wav_8000", json={"text": "Again."})
        assert wav.status_code == 200 and wav.content == convert_whole(b"".join(PIECES), parse_output_format("wav_8000"))


async def test_a_failed_synthesis_is_a_500_in_elevenlabs_shape(redis: Redis, make_settings: Any) -> None:
    worker = PlayedWorker(redis)
    async with app(make_settings, cache_enabled=False) as client:
        for path in ("/v1/text-to-speech/zh_female/stream", "/v1/text-to-speech/zh_female/with-timestamps"):
            answering = asyncio.create_task(client.post(path, json={"text": "This one fails."}))
            await worker.run([], fail="the engine broke")
            answer = await asyncio.wait_for(answering, GUARD_S)
            assert answer.status_code == 500, answer.text
            assert answer.json()["detail"]["status"] == "synthesis_failed"
            assert "the engine broke" in answer.json()["detail"]["message"]


async def test_text_to_dialogue_shares_the_options_the_seed_and_the_error_shape(redis: Redis, make_settings: Any) -> None:
    worker = PlayedWorker(redis)
    inputs = [{"text": "Hi.", "voice_id": "zh_female", "voice_settings": {"stability": 1}}, {"text": "Yo.", "voice_id": "zh_male"}]
    body = {"inputs": inputs, "seed": 2**32 - 5, "model_id": "eleven_v3", "settings": None}
    async with app(make_settings, cache_enabled=False) as client:
        answer, job = await spoken(client, worker, "/v1/text-to-dialogue/stream?output_format=pcm_24000", body)
        assert answer.status_code == 200, answer.text
        assert answer.content == b"".join(PIECES) and answer.headers["x-ttsq-task-id"] == job.id
        assert answer.headers["x-ttsq-ignored-fields"] == "inputs.voice_settings, model_id", "named as on text-to-speech"
        assert job.params.seed == 2**31 - 5, "folded into ttsq's range as text-to-speech's seed is"
        answering = asyncio.create_task(client.post("/v1/text-to-dialogue", json={"inputs": inputs[1:]}))
        await worker.run([], fail="the engine broke")
        failed = await asyncio.wait_for(answering, GUARD_S)
        assert_elevenlabs_body(failed, 500, "synthesis_failed")
        assert "the engine broke" in failed.json()["detail"]["message"]
        unknown = await client.post("/v1/text-to-dialogue?output_format=opus_44100_64", json={"inputs": inputs[1:]})
        assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["query", "output_format"]
        schema = (await client.get("/openapi.json")).json()["paths"]["/v1/text-to-dialogue"]["post"]["responses"]
    assert schema["401"]["content"]["application/json"]["schema"]["$ref"].endswith("/ElevenLabsErrorBody")
    assert "404" not in schema, "a dialogue's unknown voice is a 422 naming its speaker, never text-to-speech's 404"


async def test_the_schema_says_no_nul_inside_the_bodies_nested_objects_as_the_server_refuses(
    redis: Redis, make_settings: Any
) -> None:
    """A NUL anywhere in a body is refused (``ttsq.api.bodies``); the document says so for the objects a body nests
    too (``voice_settings``, a dialogue's ``inputs`` and ``lines``), which are components of their own."""
    no_nul = {"pattern": "^[^\\u0000]*$"}
    async with app(make_settings) as client:
        components = (await client.get("/openapi.json")).json()["components"]["schemas"]
        for path, body in (
            ("/v1/text-to-speech/zh_female", {"text": "Hi.", "voice_settings": {"knob\x00": 1}}),
            ("/v1/text-to-dialogue", {"inputs": [{"text": "Hi\x00.", "voice_id": "zh_female"}]}),
        ):
            answer = await client.post(path, json=body)
            assert answer.status_code == 422 and "NUL" in answer.text, answer.text
    assert components["VoiceSettings"]["propertyNames"] == no_nul
    assert components["ElevenLabsDialogueInput"]["propertyNames"] == no_nul
    assert components["ElevenLabsDialogueInput"]["properties"]["text"]["pattern"] == no_nul["pattern"]
    assert components["DialogueLine"]["properties"]["text"]["pattern"] == no_nul["pattern"]


def assert_elevenlabs_body(answer: httpx.Response, status: int, kind: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"detail"} and set(body["detail"]) == {"status", "message"}, body
    assert body["detail"]["status"] == kind and body["detail"]["message"], body


async def test_keys_come_from_xi_api_key_or_ttsqs_headers_with_the_same_scopes(redis: Redis, make_settings: Any) -> None:
    tts = await new_key(redis, "tts")
    metrics_only = await new_key(redis, "metrics")
    async with app(make_settings, auth="on") as client:
        path = "/v1/text-to-speech/nobody"  # a key that passes meets the voice check: 404, before any job is queued
        assert_elevenlabs_body(await client.post(path, json={"text": "hi"}), 401, "invalid_api_key")
        wrong = await client.post(path, json={"text": "hi"}, headers={"xi-api-key": "sk_not_a_key"})
        assert_elevenlabs_body(wrong, 401, "invalid_api_key")
        lacking = await client.post(path, json={"text": "hi"}, headers={"xi-api-key": metrics_only})
        assert_elevenlabs_body(lacking, 403, "missing_permissions")
        for headers in ({"xi-api-key": tts}, {"X-API-Key": tts}, {"Authorization": f"Bearer {tts}"}):
            assert_elevenlabs_body(await client.post(path, json={"text": "hi"}, headers=headers), 404, "voice_not_found")
        unread = await client.post(path, content=b"{not json", headers={"content-type": "application/json"})
        assert_elevenlabs_body(unread, 401, "invalid_api_key")  # the key first: a refused caller learns nothing of its body
        dialogue = await client.post("/v1/text-to-dialogue", json={"inputs": [{"text": "hi", "voice_id": "alloy"}]})
        assert_elevenlabs_body(dialogue, 401, "invalid_api_key")  # ElevenLabs' other route answers in its shape too


async def test_refusals_name_what_to_fix(redis: Redis, make_settings: Any) -> None:
    async with app(make_settings) as client:
        unknown = await client.post("/v1/text-to-speech/21m00Tcm4TlvDq8EDAcm", json={"text": "hi"})
        assert_elevenlabs_body(unknown, 404, "voice_not_found")
        assert "alloy" in unknown.json()["detail"]["message"] and "zh_female" in unknown.json()["detail"]["message"]

        refusals = (("opus_44100_64", "opus at 44100 Hz"), ("flac_44100", "unknown output_format"), ("pcm_24000_64", "bit rate"))
        for fmt, says in refusals:
            refused = await client.post(f"/v1/text-to-speech/alloy?output_format={fmt}", json={"text": "hi"})
            assert refused.status_code == 422, refused.text
            (error,) = refused.json()["detail"]
            assert error["loc"] == ["query", "output_format"] and says in error["msg"], error

        cases: list[tuple[dict[str, Any], list[Any]]] = [
            ({}, ["body", "text"]),
            ({"text": ""}, ["body", "text"]),
            ({"text": "hi", "voice_settings": {"speed": 9.0}}, ["body", "voice_settings", "speed"]),
            ({"text": "hi", "voice_settings": {"speed": "fast"}}, ["body", "voice_settings", "speed"]),
            ({"text": "hi", "seed": -1}, ["body", "seed"]),
            ({"text": "hi", "seed": 2**32}, ["body", "seed"]),
            ({"text": "hi", "model_id": 3}, ["body", "model_id"]),
        ]
        for body, loc in cases:
            refused = await client.post("/v1/text-to-speech/alloy/stream", json=body)
            assert refused.status_code == 422, (body, refused.text)
            assert refused.json()["detail"][0]["loc"] == loc, (body, refused.json())
        blend = await client.post("/v1/text-to-speech/alloy*0.5+nobody*0.5", json={"text": "hi"})
        assert blend.status_code == 422 and "nobody" in blend.text
        latency = await client.post("/v1/text-to-speech/alloy/stream?optimize_streaming_latency=9", json={"text": "hi"})
        assert latency.status_code == 422
        wrong_method = await client.get("/v1/text-to-speech/alloy")
        assert_elevenlabs_body(wrong_method, 405, "method_not_allowed")
        elsewhere = await client.get("/v1/tts/nothing-here")
        assert elsewhere.status_code == 404 and isinstance(elsewhere.json()["detail"], str), "the native API keeps its shape"


async def test_a_redis_outage_is_a_503_with_retry_after(make_settings: Any) -> None:
    async with app(make_settings, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_connect_timeout_s=0.2) as client:
        down = await client.post("/v1/text-to-speech/alloy", json={"text": "is anyone there"})
        assert_elevenlabs_body(down, 503, "service_unavailable")
        assert down.headers["retry-after"]


def test_output_formats_and_seeds_map_without_surprises() -> None:
    assert (parse_output_format("ulaw_8000").encoding, parse_output_format("ulaw_8000").sample_rate) == ("pcm_mulaw", 8000)
    assert {parse_output_format(name).content_type for name in ("mp3_44100_128", "mp3_22050_32", "mp3_44100")} == {"audio/mpeg"}
    for name in ("mp3_44100_999", "", "PCM_24000", "opus_44100_64"):
        with pytest.raises(ValueError):
            parse_output_format(name)
    assert [sampling_seed(s) for s in (0, 42, 2**31 - 1, 2**31, 2**32 - 1)] == [0, 42, 2**31 - 1, 0, 2**31 - 1]
    sent = {f"x{i}": 1 for i in range(30)} | {"bad name!": 1, "text": "hi", "model_id": None}
    named = ignored_options(sent, frozenset({"text"}))
    assert named[-1] == "and 11 more" and "(unnamed)" in named and "text" not in named and "model_id" not in named


def test_the_schemas_output_format_pattern_holds_every_name_ttsq_makes_and_no_other_shape() -> None:
    """The OpenAPI document's pattern (what a generated client or a fuzzer goes by) admits every name the routes take;
    what it refuses, the routes refuse too."""
    pattern = re.compile(OUTPUT_FORMAT_PATTERN)
    taken = []
    for kind in ("mp3", "opus", "pcm", "ulaw", "alaw", "wav"):
        for rate in (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 96000):
            for tail in ("", *(f"_{kbps}" for kbps in range(0, 1000, 7)), "_128"):
                try:
                    parse_output_format(f"{kind}_{rate}{tail}")
                except UnsupportedFormat:
                    continue
                taken.append(f"{kind}_{rate}{tail}")
    assert len(taken) > 300 and all(pattern.fullmatch(name) for name in taken)
    for name in ("pcm_24000_5", "flac_44100", "mp3_441", "\t;", "opus_48000_1000", "pcm_1234567"):
        assert pattern.fullmatch(name) is None
        with pytest.raises(UnsupportedFormat):
            parse_output_format(name)


def test_the_docs_name_every_option_that_is_not_acted_on() -> None:
    from tests.support.service import ROOT

    page = (ROOT / "docs" / "protocols" / "elevenlabs.md").read_text(encoding="utf-8")
    missing = [name for name in IGNORED_OPTIONS if f"`{name}`" not in page]
    assert missing == [], f"docs/protocols/elevenlabs.md does not name: {missing}"
