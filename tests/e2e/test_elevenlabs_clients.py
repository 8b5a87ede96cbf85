"""ElevenLabs' stock clients against a real ttsq (redis-server, uvicorn, a worker on the tiny checkpoint), each with only its
base URL and key changed: the ``elevenlabs`` SDK's ``convert``, ``stream``, ``convert_with_timestamps`` and
``stream_with_timestamps``, LiveKit's ElevenLabs ``synthesize()`` and Pipecat's ``ElevenLabsHttpTTSService``.

They run in the frameworks' virtual environment (var/agents-venv: ``make agent-clients``, which ``make test`` installs),
driven by tests/agents/elevenlabs_clients.py in a process of their own. Each must get exactly ttsq's own audio for the
same text, voice and seed: the API under test runs without the result cache, so every call is synthesised afresh and
compared with a native submit synthesised on its own (a voice fixes the sampling seed: the same text and voice give the
same samples).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_agent_clients import AGENTS_PYTHON
from tests.support.service import ROOT, Service
from ttsq.domain.converter import convert_whole
from ttsq.domain.output_formats import parse_elevenlabs

pytestmark = pytest.mark.e2e

DRIVER = ROOT / "tests" / "agents" / "elevenlabs_clients.py"
TEXT = "Hello from the ElevenLabs client. This is the second sentence, spoken after it."
VOICE = "zh_female"
LIVEKIT_MARKER_BYTES = 24_000 // 100 * 2
"""LiveKit ends a segment whose audio fills its last frame exactly with a 10 ms frame of zeros (its end marker)."""


def drive(mode: str, url: str, key: str, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(AGENTS_PYTHON), str(DRIVER), mode, url, key, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def native_pcm(url: str, text: str, voice: str, key: str | None = None, *, listen: bool = True) -> bytes:
    """ttsq's own answer for ``text`` in ``voice``, as raw PCM16 at 24 kHz; ``listen``: decoded in pieces, as a streamed
    answer is (else whole, as ``/with-timestamps``'s one object): the two agree only to float rounding (docs/decoder.md),
    so each answer is held to the reference decoded its way."""
    headers = {"X-API-Key": key} if key else {}
    body = {"text": text, "voice": voice, "format": "pcm", "listen": listen}
    submitted = httpx.post(f"{url}/v1/tts/submit", json=body, headers=headers, timeout=30)
    assert submitted.status_code == 202, submitted.text
    result = httpx.get(f"{url}/v1/tts/result/{submitted.json()['task_id']}", params={"wait": 60}, headers=headers, timeout=90)
    assert result.status_code == 200, result.text
    return result.content


@pytest.fixture()
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.skip("the frameworks' venv is missing: run `make agent-clients` (make test does)")
    return AGENTS_PYTHON


def test_the_sdk_and_livekit_get_ttsqs_own_audio(service: Service, agents_python: Path, tmp_path: Path) -> None:
    service.start_worker("elevenlabs")
    url = service.start_api("api-uncached", CACHE_ENABLED="false")
    expected = native_pcm(url, TEXT, VOICE)
    whole = native_pcm(url, TEXT, VOICE, listen=False)
    assert len(expected) > 0
    # Each call is held to the reference decoded as it is: all stream as they are made but one JSON object.
    reference = {"convert": expected, "stream": expected, "convert_with_timestamps": whole, "stream_with_timestamps": expected}

    out = tmp_path / "pcm"
    out.mkdir()
    calls = drive("sdk", url, "sk_any_key_on_loopback", VOICE, str(out), "pcm_24000", TEXT)
    assert [c["error"] for c in calls] == [None] * 4, calls
    for call in calls:
        assert (out / f"{call['call']}.bin").read_bytes() == reference[call["call"]], call
    assert calls[1]["chunks"] > 1, "the stream came in pieces, as synthesised"

    (synthesized,) = drive("livekit-synthesize", url, "sk_any_key_on_loopback", VOICE, str(out), TEXT)
    assert synthesized["error"] is None and synthesized["sample_rate"] == 24_000, synthesized
    heard = (out / "synthesize.bin").read_bytes()
    marker = heard[len(expected) :]
    assert heard[: len(expected)] == expected and len(marker) <= LIVEKIT_MARKER_BYTES and not any(marker), synthesized

    # Pipecat's HTTP service: one request per sentence (/stream/with-timestamps), each its own job, as ttsq's own.
    pieces = ["Hello from the Pipecat service.", "This is its second sentence."]
    (piped,) = drive("pipecat-http", url, "sk_any_key_on_loopback", VOICE, str(out), *pieces)
    assert piped["errors"] == [] and piped["sample_rate"] == 24_000, piped
    assert (out / "pipecat_http.bin").read_bytes() == b"".join(native_pcm(url, piece, VOICE) for piece in pieces)

    # Other formats: exactly ttsq's converter fed that same audio (the default, MP3 at 44.1 kHz; µ-law for a phone).
    for fmt in (None, "ulaw_8000", "pcm_16000"):
        named = tmp_path / (fmt or "default")
        named.mkdir()
        calls = drive("sdk", url, "sk_any_key_on_loopback", VOICE, str(named), fmt or "", TEXT)
        assert [c["error"] for c in calls] == [None] * 4, calls
        for call in calls:
            converted = convert_whole(reference[call["call"]], parse_elevenlabs(fmt or None))
            assert (named / f"{call['call']}.bin").read_bytes() == converted, (fmt, call)


def test_refusals_reach_each_client_as_the_error_it_knows(service: Service, agents_python: Path) -> None:
    """A bad key, an unknown voice, a format not offered, a malformed body: each client raises its own error with the
    status ElevenLabs would answer (no worker is needed: each is refused before a job is queued)."""
    url = service.start_api("api-keyed", AUTH="on")
    key = service.create_key("elevenlabs", "tts")
    sdk = {c["call"]: c["error"] for c in drive("sdk-refusals", url, key, VOICE)}
    assert sdk["bad_key"]["type"] == "ApiError" and sdk["bad_key"]["status"] == 401, sdk
    assert sdk["bad_key"]["body"]["detail"]["status"] == "invalid_api_key", sdk
    assert sdk["unknown_voice"]["status"] == 404 and sdk["unknown_voice"]["body"]["detail"]["status"] == "voice_not_found", sdk
    for call in ("unsupported_format", "empty_text"):
        assert sdk[call]["type"] == "UnprocessableEntityError" and sdk[call]["status"] == 422, sdk

    livekit = {c["call"]: c["error"] for c in drive("livekit-refusals", url, key, VOICE)}
    assert livekit["bad_key"]["type"] == "APIStatusError" and livekit["bad_key"]["status"] == 401, livekit
    assert livekit["unknown_voice"]["type"] == "APIStatusError" and livekit["unknown_voice"]["status"] == 404, livekit
