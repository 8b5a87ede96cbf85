"""The OpenAI-compatible endpoint driven by the official ``openai`` Python package, against real processes."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
import openai
import pytest
import soundfile as sf

from openai_api import chattts_speed
from tests.service import Service

pytestmark = pytest.mark.e2e


def client_for(service: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{service.api_url}/v1", api_key="not-needed", max_retries=0, timeout=120)


def test_openai_sdk_speech_in_every_supported_format(service: Service) -> None:
    service.start_worker("openai")
    client = client_for(service)
    for fmt in ("wav", "mp3", "flac", "opus"):
        audio = client.audio.speech.create(model="tts-1", voice="alloy", input="Hello from the OpenAI SDK.", response_format=fmt)
        samples, rate = sf.read(io.BytesIO(audio.content))
        assert rate == 24000 and len(samples) > 0, fmt
    pcm = client.audio.speech.create(model="gpt-4o-mini-tts", voice="nova", input="Raw samples please.", response_format="pcm")
    assert len(pcm.content) > 0 and len(pcm.content) % 2 == 0


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
    assert events[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == whole.content


def test_openai_sdk_errors(service: Service) -> None:
    client = client_for(service)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"voice": "nobody"}, "voice"),
        ({"response_format": "aac"}, "AAC"),
        ({"speed": 5.0}, "speed"),
        ({"input": ""}, "input"),
        ({"input": "a" * 501}, "input"),
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


def test_speed_mapping() -> None:
    assert [chattts_speed(s) for s in (0.25, 0.5, 1.0, 2.0, 4.0)] == [1, 3, 5, 7, 9]
