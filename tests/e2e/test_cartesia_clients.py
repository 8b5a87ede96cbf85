"""Cartesia's stock clients and a Google Cloud REST request against a real ttsq (uvicorn, a worker, redis-server): each
with only its base URL and key changed (and a ttsq voice) gets the audio ttsq's own API makes for the same text, voice
and seed.

The clients run unmodified in the frameworks' virtual environment (``make agent-clients``: var/agents-venv), driven by
tests/agents/cartesia_clients.py in a process of their own, as an agent's would be. ``TTSQ_AGENTS_PYTHON`` names another
interpreter with the same packages (a venv built by ``scripts/install_agent_clients.sh`` elsewhere).
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.service import ROOT, Service

pytestmark = pytest.mark.e2e

AGENTS_PYTHON = Path(os.environ.get("TTSQ_AGENTS_PYTHON") or ROOT / "var" / "agents-venv" / "bin" / "python")
CLIENTS = ROOT / "tests" / "agents" / "cartesia_clients.py"
CLIENT_MODULES = ("livekit.plugins.cartesia", "pipecat.services.cartesia.tts", "cartesia")
TEXT = "The agent answers in two sentences. This is the second one, spoken after it."
RATE = 24_000


@pytest.fixture()
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.skip("the frameworks' venv is missing: run `make agent-clients` (make test does)")
    probe = subprocess.run(
        [str(AGENTS_PYTHON), "-c", "; ".join(f"import {module}" for module in CLIENT_MODULES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"the frameworks' venv lacks Cartesia's clients ({', '.join(CLIENT_MODULES)}): run `make agent-clients`")
    return AGENTS_PYTHON


def run_clients(python: Path, url: str, key: str, out: Path, *steps: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [str(python), str(CLIENTS), url, key, "alloy", str(out), TEXT, *steps],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line["step"]: line for line in lines}


def reference_pcm(url: str, key: str, *, listen: bool) -> bytes:
    """ttsq's own answer for the same text and voice (``alloy`` is ``zh_female``; a voice fixes the seed), as PCM16;
    ``listen``: decoded in pieces, as a streamed answer is (else whole, as a finished file's): the two agree only to
    float rounding (docs/decoder.md), so each answer is held to the reference decoded its way."""
    headers = {"Authorization": f"Bearer {key}"}
    body = {"text": TEXT, "voice": "zh_female", "format": "pcm", "listen": listen}
    submitted = httpx.post(f"{url}/v1/tts/submit", json=body, headers=headers, timeout=30)
    assert submitted.status_code == 202, submitted.text
    answer = httpx.get(f"{url}/v1/tts/result/{submitted.json()['task_id']}", params={"wait": 120}, headers=headers, timeout=150)
    assert answer.status_code == 200, answer.text
    return answer.content


def assert_same_audio(got: bytes, expected: bytes) -> None:
    """``got`` is ``expected``, but for the 10 ms of silence LiveKit appends to a segment that ends on a frame boundary
    (its end marker: ``livekit/agents/tts/tts.py``)."""
    assert len(expected) > 0
    marker = got[len(expected) :]
    assert got[: len(expected)] == expected, (len(got), len(expected))
    assert len(marker) <= RATE // 100 * 2 and marker == b"\0" * len(marker), len(marker)


def test_cartesia_clients_and_a_google_request_get_ttsqs_audio_for_the_same_text_and_voice(
    service: Service, agents_python: Path, tmp_path: Path
) -> None:
    """LiveKit's ``synthesize()`` and Pipecat's ``CartesiaHttpTTSService`` (``X-API-Key``, raw PCM16 at 24 kHz), the
    SDK's ``tts.generate`` (``Authorization: Bearer``, WAV) and a Google ``text:synthesize`` (LINEAR16): each the same
    samples as ttsq's own submit of the text. Against an API without the result cache, so that each is synthesised
    again by the worker, not answered from the first one's result; a refused voice reaches LiveKit as its error."""
    service.start_worker("cartesia")
    url = service.start_api("uncached", CACHE_ENABLED="false")
    key = service.create_key("cartesia", "tts")
    found = run_clients(agents_python, url, key, tmp_path, "livekit-synthesize", "pipecat-http", "sdk-generate", "livekit-refused")
    streamed, whole = reference_pcm(url, key, listen=True), reference_pcm(url, key, listen=False)

    for step in ("livekit-synthesize", "pipecat-http"):  # raw PCM, streamed as it is made
        assert found[step]["error"] is None and found[step]["sample_rate"] == RATE, found[step]
        assert_same_audio((tmp_path / f"{step}.pcm").read_bytes(), streamed)
    assert found["sdk-generate"]["error"] is None, found["sdk-generate"]
    with wave.open(io.BytesIO((tmp_path / "sdk-generate.wav").read_bytes())) as read:  # a WAV: the finished file
        assert read.getframerate() == RATE and read.readframes(read.getnframes()) == whole
    refused = found["livekit-refused"]
    assert refused["pcm_bytes"] == 0 and "400" in refused["error"], refused

    voice = {"languageCode": "en-US", "name": "alloy"}
    body = {"input": {"text": TEXT}, "voice": voice, "audioConfig": {"audioEncoding": "LINEAR16"}}
    google = httpx.post(f"{url}/v1/text:synthesize", headers={"x-goog-api-key": key}, json=body, timeout=150)
    assert google.status_code == 200, google.text
    with wave.open(io.BytesIO(base64.b64decode(google.json()["audioContent"]))) as read:
        assert read.getframerate() == RATE and read.readframes(read.getnframes()) == whole
