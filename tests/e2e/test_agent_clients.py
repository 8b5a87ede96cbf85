"""The voice-agent frameworks' own TTS clients against a real ttsq: LiveKit Agents' OpenAI plugin (its default
model, which asks for SSE, and ``tts-1``, which asks for bytes) and Pipecat's ``OpenAITTSService`` in a pipeline.

They run unmodified but for base URL and key, in their own virtual environment (``make agent-clients``:
var/agents-venv, which ``make test`` installs), because their pins (aiohttp, protobuf, openai) are theirs, not
ttsq's. Each must get the whole text's audio: as many samples as ttsq's own answer for the same pieces."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.service import ROOT, Service

pytestmark = pytest.mark.e2e

AGENTS_PYTHON = ROOT / "var" / "agents-venv" / "bin" / "python"
PLUGINS = os.pathsep.join(str(ROOT / "integrations" / name) for name in ("livekit-plugins-ttsq", "ttsq-pipecat"))
"""ttsq's two plugin distributions (integrations/), each its own import root."""
CLIENTS = Path(__file__).resolve().parent.parent / "agents" / "clients.py"
PIECES = ["The agent answers in two sentences.", "This is the second one, spoken after it."]
MP3_FRAME = 1152
"""An MP3 frame's samples: LiveKit's default model asks for MP3, whose encoder pads each answer to whole frames and
adds its delay; the decoded length is the PCM's within two frames per request."""


def run_client(framework: str, service: Service, model: str, pieces: list[str] = PIECES) -> dict[str, Any]:
    done = subprocess.run(
        [str(AGENTS_PYTHON), str(CLIENTS), framework, service.api_url, "no-key-on-loopback", model, *pieces],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PLUGINS},  # ttsq's plugins as they are in the tree
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def reference_pcm_bytes(service: Service) -> int:
    """ttsq's own answer for each piece as raw PCM16 (the same voice the clients ask for)."""
    total = 0
    for piece in PIECES:
        answer = httpx.post(
            f"{service.api_url}/v1/audio/speech",
            json={"model": "tts-1", "voice": "alloy", "input": piece, "response_format": "pcm"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        total += len(answer.content)
    return total


@pytest.fixture()
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.skip("the frameworks' venv is missing: run `make agent-clients` (make test does)")
    return AGENTS_PYTHON


def test_livekit_and_pipecat_openai_clients_get_the_whole_text(service: Service, agents_python: Path) -> None:
    service.start_worker("agents")
    expected = reference_pcm_bytes(service)
    assert expected > 0

    default = run_client("livekit", service, "gpt-4o-mini-tts")  # the plugin's default: stream_format "sse", MP3
    assert default["sample_rate"] == 24_000
    slack = 2 * MP3_FRAME * 2 * len(PIECES)
    assert abs(int(default["pcm_bytes"]) - expected) <= slack, (default, expected)

    raw = run_client("livekit", service, "tts-1")  # bytes, not SSE
    assert abs(int(raw["pcm_bytes"]) - expected) <= slack, (raw, expected)

    piped = run_client("pipecat", service, "tts-1")  # PCM through a pipeline, a TTSSpeakFrame per piece
    assert piped["errors"] == [], piped
    assert piped["sample_rate"] == 24_000 and piped["pcm_bytes"] == expected, (piped, expected)


def test_ttsq_plugins_stream_an_llm_reply_into_the_realtime_route(service: Service, agents_python: Path) -> None:
    """ttsq's LiveKit plugin (``tts.stream()``: push_text, end_input) and Pipecat service (a pipeline fed an LLM's
    frames, token by token) get audio back before the text ends, and all of it: the text's audio as submitted whole."""
    service.start_worker("agents-stream")
    tokens = [word + " " for word in " ".join(PIECES).split(" ")]
    whole = httpx.post(
        f"{service.api_url}/v1/tts/submit",
        json={"text": " ".join(PIECES), "voice": "zh_female", "seed": 7, "format": "pcm", "listen": True},  # as a session's
        timeout=30,
    )
    task_id = whole.json()["task_id"]
    service.wait_status(task_id, {"done"})
    expected = len(httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", timeout=30).content)
    for framework in ("livekit-stream", "pipecat-stream"):
        found = run_client(framework, service, "zh_female", tokens)
        assert found.get("errors", []) == [], (framework, found)
        assert found["audio_before_input_ended"], (framework, found)
        assert found["sample_rate"] == 24_000 and found["pcm_bytes"] == expected, (framework, found, expected)
