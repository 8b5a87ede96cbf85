"""Cartesia's stock streaming clients against a real ttsq (uvicorn, a worker, redis-server) on ``/tts/websocket``: each,
with only its base URL and key changed (and a ttsq voice), gets its audio before the text ends, and a context's audio
is ttsq's own realtime session's for the same text and voice.

The clients run unmodified in the frameworks' virtual environment (``make agent-clients``: var/agents-venv), driven by
tests/agents/cartesia_clients.py in a process of their own, as an agent's would be: LiveKit's ``TTS.stream()`` fed a
word at a time, and Pipecat's ``CartesiaTTSService`` in a pipeline fed an LLM's reply token by token, turn 1
interrupted once its first audio came (its context cancelled on the socket) and turn 2 on the same socket to its end.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.support.service import ROOT, Service

pytestmark = pytest.mark.e2e

AGENTS_PYTHON = Path(os.environ.get("TTSQ_AGENTS_PYTHON") or ROOT / "var" / "agents-venv" / "bin" / "python")
CLIENTS = ROOT / "tests" / "agents" / "cartesia_clients.py"
CLIENT_MODULES = ("livekit.plugins.cartesia", "pipecat.services.cartesia.tts")
TEXT = " ".join(
    [
        "The agent answers in several sentences.",
        "This is the second one, spoken after it.",
        "The third sentence follows the second.",
        "A fourth one keeps the words coming.",
        "The fifth is still being written now.",
        "Sentence six arrives word by word.",
        "The seventh comes at an LLM's pace.",
        "The eighth adds a little more.",
        "Then a ninth sentence is written.",
        "The tenth is no different at all.",
        "Eleven sentences are nearly enough.",
        "The twelfth goes on a little longer.",
        "A thirteenth is almost the last.",
        "And the fourteenth ends the answer.",
    ]
)
"""Long enough that an LLM's pace (the driver's ``LLM_PACE_S`` a word) is still writing it when its first sentence's audio
comes back from a worker on a CPU."""
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
        env={**os.environ, "CARTESIA_TURN_2": TEXT},  # Pipecat's turn 2 is the whole text, uninterrupted
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line["step"]: line for line in lines}


def session_pcm(url: str, key: str, text: str) -> bytes:
    """ttsq's own realtime session's audio for ``text`` in one piece, voice ``alloy`` (a voice fixes the seed)."""
    audio = bytearray()
    ws_url = url.replace("http://", "ws://") + "/v1/tts/realtime"
    with connect(ws_url, additional_headers={"X-API-Key": key}, open_timeout=60) as ws:
        ws.send(json.dumps({"type": "session.start", "voice": "alloy"}))
        ws.send(json.dumps({"type": "text", "text": text}))
        ws.send(json.dumps({"type": "close"}))
        while True:
            message = ws.recv(timeout=120)
            if isinstance(message, bytes):
                audio += message
            elif json.loads(message)["type"] in ("session.done", "error"):
                assert json.loads(message)["type"] == "session.done", message
                break
    return bytes(audio)


def assert_same_audio(got: bytes, expected: bytes) -> None:
    """``got`` is ``expected``, but for the 10 ms of silence LiveKit appends to a segment that ends on a frame boundary
    (its end marker: ``livekit/agents/tts/tts.py``)."""
    assert len(expected) > 0
    marker = got[len(expected) :]
    assert got[: len(expected)] == expected, (len(got), len(expected))
    assert len(marker) <= RATE // 100 * 2 and marker == b"\0" * len(marker), len(marker)


def test_livekit_and_pipecat_cartesia_streams_get_ttsqs_session_audio_before_the_text_ends(
    service: Service, agents_python: Path, tmp_path: Path
) -> None:
    """Against an API without the result cache, so that each context is synthesised again by the worker, not answered
    from the reference's results."""
    service.start_worker("cartesia-ws")
    url = service.start_api("uncached", CACHE_ENABLED="false")
    key = service.create_key("cartesia-ws", "tts")
    found = run_clients(agents_python, url, key, tmp_path, "livekit-stream", "pipecat-ws")

    livekit = found["livekit-stream"]
    assert livekit["error"] is None and livekit["sample_rate"] == RATE, livekit
    assert livekit["audio_before_text_ended"], livekit
    expected = session_pcm(url, key, TEXT)
    assert_same_audio((tmp_path / "livekit-stream.pcm").read_bytes(), expected)

    pipecat = found["pipecat-ws"]
    assert pipecat["error"] is None and pipecat["sample_rate"] == RATE, pipecat
    assert pipecat["turn1"]["pcm_bytes"] > 0 and pipecat["turn1"]["audio_before_text_ended"], pipecat
    assert pipecat["turn2"]["audio_before_text_ended"], pipecat
    turn1 = (tmp_path / "pipecat-ws-turn1.pcm").read_bytes()
    assert expected.startswith(turn1), "turn 1, interrupted: the start of its text's audio"
    assert (tmp_path / "pipecat-ws-turn2.pcm").read_bytes() == expected, "turn 2, whole"
