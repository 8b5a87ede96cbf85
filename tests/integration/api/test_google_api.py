"""Google Cloud's ``POST /v1/text:synthesize`` against the real app (lifespan included) on a real Redis, with a plain
HTTP client writing Google's documented request shape: the audio base64 in ``audioContent`` (plain, not a data: URI),
LINEAR16 a WAV file at the rate asked, what each field becomes, and every refusal in Google's error shape.

No worker: the test plays it through the queue's own calls (claim, publish, complete), as tests/unit/store/test_listener.py does.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_cartesia_api import GUARD_S, PIECES, claimed_when_queued, play_worker
from tests.integration.api.test_security import new_key
from ttsq.api.google import IGNORED_OPTIONS
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.converter import convert_whole
from ttsq.domain.encoders import decode_pcm16
from ttsq.domain.output_formats import parse_google
from ttsq.store.queue import JobQueue

ROOT = Path(__file__).resolve().parents[3]
SYNTHESIZE = "/v1/text:synthesize"


def request(**changes: Any) -> dict[str, Any]:
    """Google's documented body (cloud.google.com/text-to-speech/docs/reference/rest/v1/text/synthesize), a ttsq voice."""
    body: dict[str, Any] = {
        "input": {"text": "Hello from a Google client."},
        "voice": {"languageCode": "en-US", "name": "alloy"},
        "audioConfig": {"audioEncoding": "LINEAR16"},
    }
    body.update(changes)
    return body


async def synthesized(client: httpx.AsyncClient, redis: Redis, body: dict[str, Any], **options: Any) -> httpx.Response:
    """Ask, play the worker, and return the answer."""
    asking = asyncio.create_task(client.post(SYNTHESIZE, json=body, **options))
    await asyncio.wait_for(play_worker(redis), GUARD_S)
    return await asyncio.wait_for(asking, GUARD_S)


def audio_content(answer: httpx.Response) -> bytes:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"audioContent"}, body
    assert not body["audioContent"].startswith("data:"), "plain base64, as Google answers, not a data: URI"
    return base64.b64decode(body["audioContent"], validate=True)


def assert_google_error(answer: httpx.Response, status: int, google_status: str, field: str | None = None) -> str:
    """Google's error body (a ``google.rpc.Status``); with ``field``: its ``BadRequest`` detail names that field."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    error = answer.json()["error"]
    assert error["code"] == status and error["status"] == google_status and error["message"], error
    if field is not None:
        (detail,) = error["details"]
        assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest", detail
        assert field in [violation["field"] for violation in detail["fieldViolations"]], error
    return str(error["message"])


async def test_linear16_is_a_wav_file_at_the_rate_asked_of_the_task_audio(redis: Redis, make_settings: Any) -> None:
    """The key in ``x-goog-api-key`` (Google's header); ``speakingRate`` 2.0 is ChatTTS's speed 7; ``pitch`` and
    ``languageCode`` accepted and named as ignored."""
    async with api_client(make_settings(auth="on")) as (client, _app):
        key = await new_key(redis, "tts")
        body = request(audioConfig={"audioEncoding": "LINEAR16", "sampleRateHertz": 24000, "speakingRate": 2.0, "pitch": -2})
        asking = asyncio.create_task(client.post(SYNTHESIZE, json=body, headers={"x-goog-api-key": key}))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    with wave.open(io.BytesIO(audio_content(answer))) as read:
        assert (read.getframerate(), read.getnchannels(), read.getsampwidth()) == (24000, 1, 2)
        assert read.readframes(read.getnframes()) == b"".join(PIECES)
    assert answer.headers["x-ttsq-ignored-fields"] == "audioConfig.pitch, voice.languageCode"
    assert (job.params.text, job.params.voice, job.params.speed) == ("Hello from a Google client.", "zh_female", 7)


async def test_a_key_in_the_query_and_enums_by_number_as_google_client_libraries_send_them(
    redis: Redis, make_settings: Any
) -> None:
    """``?key=`` (Google's other place for an API key) and ``audioEncoding: 7`` (PCM by number, as the REST transports
    of Google's libraries send enums, with ``$alt=json;enum-encoding=int``): headerless PCM16."""
    async with api_client(make_settings(auth="on")) as (client, _app):
        key = await new_key(redis, "tts")
        body = request(audioConfig={"audioEncoding": 7}, voice={"name": "zh_male", "ssmlGender": 1})
        answer = await synthesized(client, redis, body, params={"key": key, "$alt": "json;enum-encoding=int"})
    assert audio_content(answer) == b"".join(PIECES)


@pytest.mark.parametrize(
    ("config", "tag", "rate"),
    [
        ({"audioEncoding": "MULAW"}, 7, 8000),  # G.711 in WAV, at 8 kHz unless asked otherwise
        ({"audioEncoding": "ALAW", "sampleRateHertz": 16000}, 6, 16000),
        ({"audioEncoding": "LINEAR16", "sampleRateHertz": 16000}, 1, 16000),
    ],
)
async def test_wav_encodings_carry_a_header_stating_their_format_rate_and_sizes(
    redis: Redis, make_settings: Any, config: dict[str, Any], tag: int, rate: int
) -> None:
    """LINEAR16, MULAW and ALAW answers carry a WAV header (Google's documented shape): its format tag (1 PCM, 6 A-law,
    7 µ-law), its rate and its data size; the data is the task's audio converted (:mod:`ttsq.domain.converter`)."""
    async with api_client(make_settings()) as (client, _app):
        answer = await synthesized(client, redis, request(audioConfig=config))
    audio = audio_content(answer)
    assert audio[:4] == b"RIFF" and audio[8:12] == b"WAVE"
    format_tag, channels, sample_rate = struct.unpack("<HHI", audio[20:28])
    assert (format_tag, channels, sample_rate) == (tag, 1, rate)
    data_size = struct.unpack("<I", audio[audio.index(b"data") + 4 : audio.index(b"data") + 8])[0]
    expected = convert_whole(b"".join(PIECES), parse_google(config["audioEncoding"], config.get("sampleRateHertz")))
    assert audio == expected and data_size == len(audio) - audio.index(b"data") - 8


async def test_mp3_and_ogg_opus_decode_to_the_task_audio(redis: Redis, make_settings: Any) -> None:
    """Compressed answers are whole files: each decodes (libav) to about the samples the worker published."""
    samples = sum(len(piece) for piece in PIECES) // 2
    async with api_client(make_settings()) as (client, _app):
        for encoding in ("MP3", "OGG_OPUS"):
            answer = await synthesized(client, redis, request(audioConfig={"audioEncoding": encoding}))
            decoded = decode_pcm16(audio_content(answer), SAMPLE_RATE)
            assert abs(len(decoded) // 2 - samples) <= 1152 * 2, (encoding, len(decoded) // 2, samples)


async def test_keys_are_checked_as_everywhere_and_refused_in_google_shape(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(auth="on")) as (client, _app):
        missing = await client.post(SYNTHESIZE, json=request())
        assert "needs an API key" in assert_google_error(missing, 401, "UNAUTHENTICATED")
        wrong = await client.post(SYNTHESIZE, json=request(), params={"key": "ttsq_0123456789ab_" + "x" * 43})
        assert "not valid" in assert_google_error(wrong, 401, "UNAUTHENTICATED")
        scoped = await client.post(SYNTHESIZE, json=request(), headers={"x-goog-api-key": await new_key(redis, "metrics")})
        assert_google_error(scoped, 403, "PERMISSION_DENIED")
        valid = await new_key(redis, "tts")
        ssml = request(input={"ssml": "<speak>x</speak>"})
        bearer = await client.post(SYNTHESIZE, json=ssml, headers={"Authorization": f"Bearer {valid}"})
        assert_google_error(bearer, 400, "INVALID_ARGUMENT", "input.ssml")  # ttsq's own header works too


@pytest.mark.parametrize(
    ("change", "field", "said"),
    [
        ({"input": {"ssml": "<speak>Hello</speak>"}}, "input.ssml", "not supported: ttsq reads input.text"),
        ({"input": {"text": "a", "ssml": "<speak>a</speak>"}}, "input", "exactly one"),
        ({"input": {}}, "input", "got none"),
        ({"input": {"text": ""}}, "input.text", "empty"),
        ({"voice": {"languageCode": "en-US", "name": "en-US-Standard-C"}}, "voice.name", "is not supported; use one of: alloy"),
        ({"voice": {"languageCode": "en-US"}}, "voice.name", "Field required"),
        ({"voice": {"name": "alloy", "customVoice": {"model": "x"}}}, "voice.customVoice", "not ttsq's"),
        ({"audioConfig": {"audioEncoding": "M4A"}}, "audioConfig.audioEncoding", "not supported"),
        ({"audioConfig": {"audioEncoding": "AUDIO_ENCODING_UNSPECIFIED"}}, "audioConfig.audioEncoding", "not supported"),
        ({"audioConfig": {"audioEncoding": 4}}, "audioConfig.audioEncoding", ""),
        ({"audioConfig": {"audioEncoding": "WAV"}}, "audioConfig.audioEncoding", ""),
        ({"audioConfig": {"audioEncoding": "LINEAR16", "speakingRate": 5}}, "audioConfig.speakingRate", "4"),
        ({"audioConfig": {"audioEncoding": "LINEAR16", "sampleRateHertz": 12345}}, "audioConfig.audioEncoding", "12345"),
        ({"audioConfig": {"audioEncoding": "OGG_OPUS", "sampleRateHertz": 44100}}, "audioConfig.audioEncoding", "44100"),
        ({"audioConfig": {}}, "audioConfig.audioEncoding", "Field required"),
    ],
)
async def test_what_ttsq_cannot_do_is_invalid_argument_naming_the_field(
    redis: Redis, make_settings: Any, change: dict[str, Any], field: str, said: str
) -> None:
    async with api_client(make_settings()) as (client, _app):
        answer = await client.post(SYNTHESIZE, json=request(**change))
    assert said in assert_google_error(answer, 400, "INVALID_ARGUMENT", field)
    assert await JobQueue(redis, queue_config()).depth() == 0, "nothing was queued"


async def test_malformed_bodies_are_invalid_argument(make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _app):
        broken = await client.post(SYNTHESIZE, content=b'{"input": ', headers={"Content-Type": "application/json"})
        assert "not JSON" in assert_google_error(broken, 400, "INVALID_ARGUMENT", "body")
        twice = await client.post(SYNTHESIZE, content=b'{"input": {}, "input": {}}', headers={"Content-Type": "application/json"})
        assert "appears more than once" in assert_google_error(twice, 400, "INVALID_ARGUMENT")
        plain = await client.post(SYNTHESIZE, content=json.dumps(request()).encode(), headers={"Content-Type": "text/plain"})
        assert "Content-Type" in assert_google_error(plain, 415, "INVALID_ARGUMENT")


async def test_a_task_that_fails_is_internal_in_google_shape(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _app):
        asking = asyncio.create_task(client.post(SYNTHESIZE, json=request()))
        queue = JobQueue(redis, queue_config())
        held = await asyncio.wait_for(claimed_when_queued(queue), GUARD_S)
        await queue.leases.fail(held.job, "the engine gave up", retryable=False, cache_key=None)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert "synthesis failed: the engine gave up" in assert_google_error(answer, 500, "INTERNAL")


async def test_a_client_that_goes_away_before_the_end_gives_its_task_up(redis: Redis, make_settings: Any) -> None:
    """The answer is one JSON body at the task's end; a client that closes its connection before then leaves the task
    nobody wants, and it is cancelled (as an OpenAI streaming client that leaves). The app is driven over ASGI with a
    connection that closes when the test says (what uvicorn tells an app when its client is gone)."""
    async with api_client(make_settings()) as (_client, app):
        gone = asyncio.Event()
        answered: list[dict[str, Any]] = []
        body = json.dumps(request()).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            answered.append(message)

        serving = asyncio.create_task(app(asgi_scope(), receive, send))  # type: ignore[arg-type]
        queue = JobQueue(redis, queue_config())
        held = await asyncio.wait_for(claimed_when_queued(queue), GUARD_S)  # running: its worker has it
        gone.set()
        await asyncio.wait_for(serving, GUARD_S)
        job = await queue.get(held.job.id)
        assert job is not None and job.cancel_requested, "the running task was asked to stop"


def asgi_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": SYNTHESIZE,
        "raw_path": SYNTHESIZE.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"ttsq.test")],
        "client": ("127.0.0.1", 1234),
        "server": ("ttsq.test", 80),
    }


def test_every_ignored_option_is_named_in_the_protocol_page() -> None:
    page = (ROOT / "docs" / "protocols" / "google.md").read_text(encoding="utf-8")
    missing = [name for name in IGNORED_OPTIONS if f"`{name}`" not in page]
    assert missing == [], f"docs/protocols/google.md does not name: {missing}"
