"""ElevenLabs' stock streaming clients against a real ttsq (redis-server, uvicorn, a worker on the tiny checkpoint) on
``/v1/text-to-speech/{voice_id}/multi-stream-input``, each with only its base URL and key changed: LiveKit's ElevenLabs
``stream()`` (two streams at once on its one pooled socket, the second closed after its first audio, then a third on
the same socket) and Pipecat's ``ElevenLabsTTSService`` in a pipeline fed an LLM's reply token by token (turn 1
interrupted after its first audio, turn 2 to its end).

They run in the frameworks' virtual environment (var/agents-venv: ``make agent-clients``, which ``make test`` installs),
driven by tests/agents/elevenlabs_clients.py in a process of their own. Each context's audio must be exactly ttsq's
own realtime session's (``/v1/tts/realtime``) for the same text and voice — the API under test runs without the result
cache, so each is synthesised afresh — and its first audio must come before its text has all been sent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.e2e.test_agent_clients import AGENTS_PYTHON
from tests.support.service import ROOT, Service

pytestmark = pytest.mark.e2e

DRIVER = ROOT / "tests" / "agents" / "elevenlabs_clients.py"
VOICE = "zh_female"
KEY = "sk_any_key_on_loopback"
LIVEKIT_MARKER_BYTES = 24_000 // 100 * 2
"""LiveKit ends a segment whose audio fills its last frame exactly with a 10 ms frame of zeros (its end marker)."""
LIVEKIT_TEXT = "Hello there, this is the first sentence of the answer. And here is a second sentence, streamed word by word."
"""What each LiveKit stream says (the driver's ``LIVEKIT_SENTENCES``)."""
PIPECAT_TURNS = [
    "Hello there, this is the first turn of the answer. It will be interrupted before it ends.",
    "This is the second turn. It plays to the very end without interruption.",
]
"""What the Pipecat pipeline's LLM says (the driver's ``PIPECAT_TURNS``); turn 1 is cut short."""


def drive(mode: str, url: str, out: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(AGENTS_PYTHON), str(DRIVER), mode, url, KEY, VOICE, str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def ttsq_session(url: str, text: str) -> bytes:
    """ttsq's own realtime session's audio for ``text`` in :data:`VOICE` (PCM16, 24 kHz): where a stream's text is
    cut depends on the text only, never on its pieces (:class:`ttsq.domain.text_stream.TextStream`)."""
    audio = bytearray()
    with connect(url.replace("http://", "ws://", 1) + "/v1/tts/realtime", open_timeout=60) as ws:
        ws.send(json.dumps({"type": "session.start", "voice": VOICE}))
        ws.send(json.dumps({"type": "text", "text": text}))
        ws.send(json.dumps({"type": "close"}))
        try:
            while True:
                message = ws.recv(timeout=120)
                if isinstance(message, bytes):
                    audio += message
                else:
                    assert json.loads(message)["type"] != "error", message
        except ConnectionClosed:
            pass
    assert len(audio) > 0
    return bytes(audio)


def without_marker(heard: bytes, expected: bytes) -> bytes:
    """LiveKit's audio less its end marker, where it added one."""
    marker = heard[len(expected) :]
    return heard[: len(expected)] if len(marker) <= LIVEKIT_MARKER_BYTES and not any(marker) else heard


@pytest.fixture()
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.skip("the frameworks' venv is missing: run `make agent-clients` (make test does)")
    return AGENTS_PYTHON


def test_livekit_streams_on_one_pooled_socket_get_ttsqs_own_audio(service: Service, agents_python: Path, tmp_path: Path) -> None:
    service.start_worker("elevenlabs-ws")
    url = service.start_api("api-uncached", CACHE_ENABLED="false")
    expected = ttsq_session(url, LIVEKIT_TEXT)

    streams = {s["call"]: s for s in drive("livekit-streams", url, tmp_path)}
    assert [s["error"] for s in streams.values()] == [None] * 3, streams
    for call in ("stream_1", "stream_3"):
        stream = streams[call]
        assert stream["sample_rate"] == 24_000, stream
        assert without_marker((tmp_path / f"{call}.bin").read_bytes(), expected) == expected, stream
        assert stream["first_chunk_s"] < stream["input_ended_s"], ("audio before the text ended", stream)
    early = (tmp_path / "stream_2_closed_early.bin").read_bytes()
    assert 0 < len(early) < len(expected) and expected.startswith(early), streams["stream_2_closed_early"]


def test_pipecat_turns_token_by_token_with_an_interruption_get_ttsqs_own_audio(
    service: Service, agents_python: Path, tmp_path: Path
) -> None:
    service.start_worker("elevenlabs-ws-pipecat")
    url = service.start_api("api-uncached", CACHE_ENABLED="false")
    expected = [ttsq_session(url, turn) for turn in PIPECAT_TURNS]

    (piped,) = drive("pipecat-ws", url, tmp_path)
    assert piped["errors"] == [] and piped["sample_rate"] == 24_000, piped
    interrupted, second = piped["turns"]
    heard = [(tmp_path / f"pipecat_turn_{index}.bin").read_bytes() for index in (1, 2)]
    assert len(heard[0]) > 0 and expected[0].startswith(heard[0]), interrupted
    assert interrupted["first_chunk_s"] is not None, interrupted
    assert heard[1] == expected[1], second
    assert second["first_chunk_s"] < second["input_ended_s"], ("audio before the text ended", second)
