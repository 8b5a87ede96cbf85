"""``POST /v1/voices`` as a multipart form (``curl -F audio=@anna.wav``), over real uvicorn with a real worker encoding
the recording: the same voice as the base64 JSON body makes, the same refusals, and no form anywhere else."""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.integration.api.test_reference_voice_api import TRANSCRIPT, audio_file
from tests.support.service import Service

pytestmark = pytest.mark.e2e


def form(service: Service, name: str, audio: bytes, transcript: str = TRANSCRIPT, **extra: str) -> httpx.Response:
    return httpx.post(
        f"{service.api_url}/v1/voices",
        data={"name": name, "transcript": transcript, **extra},
        files={"audio": ("anna.flac", audio, "audio/flac")},
        timeout=60,
    )


def test_a_multipart_upload_makes_the_voice_the_json_body_makes_and_is_refused_as_json_is(service: Service) -> None:
    service.start_worker("encoder")
    recording = audio_file(4.0, "FLAC")
    uploaded = form(service, "uploaded", recording)
    assert uploaded.status_code == 201, uploaded.text
    sent = httpx.post(
        f"{service.api_url}/v1/voices",
        json={"name": "sent", "audio": base64.b64encode(recording).decode(), "transcript": TRANSCRIPT},
        timeout=60,
    )
    assert sent.status_code == 201, sent.text
    assert uploaded.json()["kind"] == "reference" and uploaded.json()["prompt"] == sent.json()["prompt"]
    assert uploaded.json()["transcript"] == TRANSCRIPT

    short = form(service, "short", audio_file(2.0))
    short_json = httpx.post(
        f"{service.api_url}/v1/voices",
        json={"name": "short", "audio": base64.b64encode(audio_file(2.0)).decode(), "transcript": TRANSCRIPT},
    )
    assert short.status_code == short_json.status_code == 422
    assert short.json()["detail"] == short_json.json()["detail"], "the same check, the same answer"
    assert "at least 3 s" in short.text
    seeded = form(service, "seeded", recording, seed="3")
    assert seeded.status_code == 422 and "seed" in seeded.text, "a form field is a string, refused where JSON wants a number"
    garbled = httpx.post(
        f"{service.api_url}/v1/voices", content=b"--x\r\nnot a form", headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert garbled.status_code == 422 and "multipart form" in garbled.text
    assert httpx.get(f"{service.api_url}/v1/voices/short").status_code == 404


def test_other_routes_still_take_json_only(service: Service) -> None:
    answer = httpx.post(f"{service.api_url}/v1/tts/submit", data={"text": "hello"}, files={"f": ("a.txt", b"x")})
    assert answer.status_code == 415, answer.text
