"""Every error on /v1/audio/* has OpenAI's body, so the official SDK raises its own exception types.

The real app runs in-process (its lifespan included) on a real Redis; the SDK talks to it through
an ASGI transport. No worker is needed: every case here fails before a job would run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI

from tests.conftest import api_client
from tests.support.redis_server import free_port


@asynccontextmanager
async def sdk(make_settings: Any, **overrides: Any) -> AsyncIterator[tuple[openai.AsyncOpenAI, httpx.AsyncClient]]:
    async with api_client(make_settings(**overrides)) as (native, app):
        yield _client(app), native


def _client(app: FastAPI) -> openai.AsyncOpenAI:
    """The SDK's own HTTP stack (openai 3 ships on httpx2), pointed at the app in-process."""
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://ttsq.test")
    return openai.AsyncOpenAI(base_url="http://ttsq.test/v1", api_key="unused", max_retries=0, http_client=http)


def assert_openai_body(error: openai.APIStatusError, param: str | None = None) -> None:
    body = error.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"], body
    if param is not None:
        assert body["error"]["param"] == param, body


async def test_invalid_input_is_a_bad_request_naming_the_openai_field(redis: Any, make_settings: Any) -> None:
    async with sdk(make_settings, openai_max_input_chars=20) as (client, _):
        with pytest.raises(openai.BadRequestError) as too_long:
            await client.audio.speech.create(model="tts-1", voice="alloy", input="x" * 50)
        assert_openai_body(too_long.value, "input")
        assert "limit is 20" in too_long.value.response.json()["error"]["message"]
        with pytest.raises(openai.BadRequestError) as bad_voice:
            await client.audio.speech.create(model="tts-1", voice="nobody", input="hi")
        assert_openai_body(bad_voice.value, "voice")
        with pytest.raises(openai.BadRequestError) as bad_speed:
            await client.audio.speech.create(model="tts-1", voice="alloy", input="hi", speed=9)
        assert_openai_body(bad_speed.value, "speed")
        with pytest.raises(openai.BadRequestError) as bad_format:
            await client.audio.speech.create(model="tts-1", voice="alloy", input="hi", response_format="ogg")  # type: ignore[arg-type]
        assert_openai_body(bad_format.value, "response_format")


async def test_a_full_queue_is_a_rate_limit_error_with_retry_after(redis: Any, make_settings: Any) -> None:
    async with sdk(make_settings, max_queue_depth=1, retry_after_s=7) as (client, native):
        assert (await native.post("/v1/tts/submit", json={"text": "fills the queue", "seed": 1})).status_code == 202
        with pytest.raises(openai.RateLimitError) as full:
            await client.audio.speech.create(model="tts-1", voice="alloy", input="one too many")
        assert_openai_body(full.value)
        assert full.value.response.headers["retry-after"] == "7"
        native_full = await native.post("/v1/tts/submit", json={"text": "native too", "seed": 2})
        assert native_full.status_code == 429 and "detail" in native_full.json(), "the native API keeps its own shape"


async def test_a_redis_outage_is_a_server_error_with_retry_after(make_settings: Any) -> None:
    async with sdk(make_settings, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_connect_timeout_s=0.2) as (client, _):
        with pytest.raises(openai.InternalServerError) as down:
            await client.audio.speech.create(model="tts-1", voice="alloy", input="is anyone there")
        assert down.value.status_code == 503
        assert_openai_body(down.value)
        assert down.value.response.headers["retry-after"]


async def test_unknown_routes_and_methods_under_audio_answer_in_openai_shape(redis: Any, make_settings: Any) -> None:
    async with sdk(make_settings) as (_, native):
        missing = await native.get("/v1/audio/transcriptions")
        assert missing.status_code == 404 and set(missing.json()) == {"error"}
        wrong_method = await native.get("/v1/audio/speech")
        assert wrong_method.status_code == 405 and set(wrong_method.json()) == {"error"}
        elsewhere = await native.get("/v1/tts/nothing-here")
        assert elsewhere.status_code == 404 and set(elsewhere.json()) == {"detail"}
