"""Dialogues end to end: a real API and a real worker (ttsq's decoder, ``BATCH_INVARIANT``) on the tiny checkpoint.

Changing one line's speaker leaves every other line's audio bit-equal; the task streams, reports its timing events
and captions with the speakers like any task; and the ``elevenlabs`` SDK's ``text_to_dialogue`` (in the frameworks'
venv, var/agents-venv) gets the same audio as the native route, with only its base URL changed.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
import webvtt

from tests.support.service import ROOT, Service

pytestmark = pytest.mark.e2e

AGENTS_PYTHON = ROOT / "var" / "agents-venv" / "bin" / "python"
DRIVER = Path(__file__).resolve().parent.parent / "agents" / "elevenlabs_dialogue.py"
LINES = [
    {"speaker": "Alice", "text": "Hello Bob, it is good to see you."},
    {"speaker": "Bob", "text": "Hello Alice. It has been a long time."},
    {"speaker": "Alice", "text": "Too long, far too long."},
]


def dialogue(service: Service, **body: Any) -> tuple[str, np.ndarray, list[dict[str, Any]]]:
    """A dialogue queued, run to its end: its task id, its samples (PCM16, a WAV's decoded) and its cues."""
    answer = httpx.post(f"{service.api_url}/v1/tts/dialogue", json={"format": "pcm", **body}, timeout=30)
    assert answer.status_code in (200, 202), answer.text
    task_id = answer.json()["task_id"]
    service.wait_status(task_id, {"done", "failed"})
    assert service.status(task_id)["status"] == "done", service.status(task_id)
    result = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", timeout=30)
    cues = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", params={"format": "json"}, timeout=30).json()
    if body.get("format", "pcm") == "pcm":
        return task_id, np.frombuffer(result.content, dtype="<i2"), cues
    samples, _ = sf.read(io.BytesIO(result.content), dtype="int16")
    return task_id, np.asarray(samples), cues


def line(samples: np.ndarray, cues: list[dict[str, Any]], segment: int) -> np.ndarray:
    """One line's speech: from its first cue's start to its last cue's end."""
    mine = [cue for cue in cues if cue["segment"] == segment]
    return samples[mine[0]["start"] : mine[-1]["end"]]


def test_changing_one_lines_speaker_leaves_every_other_line_bit_equal_and_the_task_streams_like_any(service: Service) -> None:
    service.start_worker("dialogue", BATCH_INVARIANT="true")
    voices = {"Alice": "zh_female", "Bob": "zh_male"}
    first_id, first, first_cues = dialogue(service, lines=LINES, voices=voices)
    changed = [LINES[0], {**LINES[1], "speaker": "Carol"}, LINES[2]]
    _, second, second_cues = dialogue(service, lines=changed, voices={**voices, "Carol": "zh_female*0.3+zh_male*0.7"})
    for segment in (0, 2):
        assert np.array_equal(line(first, first_cues, segment), line(second, second_cues, segment)), f"line {segment}"
    assert not np.array_equal(line(first, first_cues, 1), line(second, second_cues, 1)), "line 1 has another voice"
    assert [cue["speaker"] for cue in second_cues if cue["segment"] == 1] == ["Carol"] * sum(
        cue["segment"] == 1 for cue in second_cues
    )
    bob = next(cue for cue in first_cues if cue["segment"] == 1)
    alice_end = max(cue["end"] for cue in first_cues if cue["segment"] == 0)
    assert bob["start"] - alice_end == 6_000, "the default gap between lines: 250 ms"
    assert not first[alice_end : bob["start"]].any() and line(first, first_cues, 1).any()

    streamed = httpx.get(f"{service.api_url}/v1/tts/stream/{first_id}", params={"format": "pcm"}, timeout=60)
    assert streamed.status_code == 200 and streamed.content == first.tobytes(), "streamed as stored"
    vtt = httpx.get(f"{service.api_url}/v1/tts/result/{first_id}", params={"format": "vtt"}, timeout=30).text
    assert [caption.voice for caption in webvtt.from_buffer(io.StringIO(vtt)).captions][:1] == ["Alice"]
    with httpx.stream("GET", f"{service.api_url}/v1/tts/events/{first_id}", timeout=60) as events:
        timings = [json.loads(data) for data in _event_data(events.iter_lines(), "timing")]
    assert [timing["index"] for timing in timings] == list(range(len(first_cues)))


def test_a_dialogue_whose_worker_is_killed_mid_way_streams_and_stores_what_a_clean_run_makes(service: Service) -> None:
    """SIGKILL of the worker once the dialogue's first audio is streamed: another worker runs it again, the reader that
    was listening gets every sample once (the stored result), and that result is a clean run's, bit for bit."""
    slow = {"BATCH_INVARIANT": "true", "MAX_NEW_TOKEN": "384", "MIN_NEW_TOKEN": "384"}
    doomed = service.start_worker("doomed", **slow)
    body = {"lines": LINES, "voices": {"Alice": "zh_female", "Bob": "zh_male"}, "format": "pcm", "seed": 5}
    task_id = httpx.post(f"{service.api_url}/v1/tts/dialogue", json=body, timeout=30).json()["task_id"]
    heard, errors, first = bytearray(), [], threading.Event()

    def listen() -> None:
        try:
            with httpx.stream("GET", f"{service.api_url}/v1/tts/stream/{task_id}?format=pcm", timeout=180) as response:
                for chunk in response.iter_bytes():
                    heard.extend(chunk)
                    first.set()
        except httpx.HTTPError as exc:
            errors.append(exc)
        first.set()

    reader = threading.Thread(target=listen)
    reader.start()
    assert first.wait(180) and not errors, errors
    assert service.status(task_id)["status"] == "running", "the kill must come while the dialogue's audio is being made"
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait()
    service.start_worker("rescuer", **slow)
    reader.join(300)
    assert not reader.is_alive() and not errors, errors
    status = service.wait_status(task_id, {"done", "failed"})
    assert status["status"] == "done" and status["attempts"] == 2, service.logs()
    stored = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", timeout=30).content
    assert bytes(heard) == stored, f"streamed {len(heard)} bytes of {len(stored)}"
    _, clean, _ = dialogue(service, **{**body, "format": "wav"})  # another format: another task, synthesised afresh
    assert clean.size and np.array_equal(np.frombuffer(stored, dtype="<i2"), clean), "the kill cost nothing"


def _event_data(lines: Any, kind: str) -> list[str]:
    """The data of every server-sent event named ``kind``, until the stream ends."""
    found, name = [], None
    for text in lines:
        if text.startswith("event: "):
            name = text.removeprefix("event: ")
        elif text.startswith("data: ") and name == kind:
            found.append(text.removeprefix("data: "))
        elif not text:
            name = None
    return found


def test_the_elevenlabs_sdk_speaks_a_dialogue_with_only_its_base_url_changed(service: Service, tmp_path: Path) -> None:
    if not AGENTS_PYTHON.exists():
        pytest.skip("the frameworks' venv is missing: run `make agent-clients` (make test does)")
    service.start_worker("elevenlabs", BATCH_INVARIANT="true")
    key = service.create_key("sdk", "tts")
    pairs = ["zh_female:Hello from the first voice.", "zh_male:And the second voice answers."]
    done = subprocess.run(
        [str(AGENTS_PYTHON), str(DRIVER), service.api_url, key, str(tmp_path), *pairs],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:], service.logs())
    native = [{"speaker": voice, "text": text} for voice, _, text in (pair.partition(":") for pair in pairs)]
    # Listened, as ElevenLabs' dialogue route is (its chunks decoded in pieces, as the SDK's were).
    voices = {"zh_female": "zh_female", "zh_male": "zh_male"}
    _, samples, cues = dialogue(service, lines=native, voices=voices, seed=7, listen=True)
    assert (tmp_path / "convert.pcm").read_bytes() == samples.tobytes(), "the SDK's audio is the native dialogue's"
    assert (tmp_path / "stream.pcm").read_bytes() == samples.tobytes()
    assert cues[0]["speaker"] == "zh_female" and cues[-1]["speaker"] == "zh_male"
    mp3 = (tmp_path / "default.mp3").read_bytes()
    assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0), "ElevenLabs' default format is mp3"
    ulaw = (tmp_path / "ulaw.raw").read_bytes()
    assert abs(len(ulaw) - samples.size / 3) <= 2, "µ-law at 8 kHz: a byte per sample, a third of 24 kHz's samples"
