"""Realtime sessions as a voice agent runs them, for the failover and slot-move chaos runs (``make failover-chaos``):
text sent word by word over ``/v1/tts/realtime``, everything read until the server closes, and each session judged —
complete (``session.done``, close 1000), ended with an error (an ``error`` event and a close code other than 1000),
or hung (no end within its deadline: what must never happen). Its audio is compared with the same text submitted
whole (``BATCH_INVARIANT``: bit for bit)."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect

from tests.chaos.ledger import WORDS

SESSION_DEADLINE_S = 240.0
"""A session that has not ended this long after its start is hung (the tiny model speaks a session in seconds)."""


@dataclass
class Session:
    """One session's story."""

    text: str
    seed: int
    voice: str = "zh_female"
    audio: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    outcome: str = "not run"
    """``complete``, ``error`` (it ended early, saying why), ``hung`` (no end by its deadline) or ``broken`` (the
    connection failed without a close code)."""
    started_at: float = 0.0
    first_audio_at: float | None = None
    ended_at: float = 0.0

    @property
    def error(self) -> str | None:
        errors = [event for event in self.events if event.get("type") == "error"]
        return f"{errors[-1].get('code')}: {errors[-1].get('message')}" if errors else None

    def line(self) -> str:
        why = f" ({self.error})" if self.error else ""
        return f"{self.outcome} close={self.close_code} audio={len(self.audio) // 2} samples{why}"


def session_text(rng: random.Random, sentences: int = 4) -> str:
    """Sentences of 21–35 characters: over half of the runs' ``MAX_CHUNK_CHARS`` (40) and within it, so a whole-text
    submit cuts where a session does (at every sentence)."""
    out = []
    for _ in range(sentences):
        words = rng.sample(WORDS, 3)
        out.append(f"{words[0].capitalize()} {words[1]} {words[2]} is here.")
    return " ".join(out)


def run_session(api_url: str, session: Session, word_pause_s: float = 0.05) -> Session:
    """Send the text word by word, then ``close``; read everything until the server closes or the deadline."""
    session.started_at = time.time()
    deadline = time.monotonic() + SESSION_DEADLINE_S
    audio = bytearray()
    try:
        with connect(api_url.replace("http://", "ws://") + "/v1/tts/realtime", open_timeout=30) as ws:
            try:
                ws.send(json.dumps({"type": "session.start", "voice": session.voice, "seed": session.seed}))
                for word in session.text.split(" "):
                    ws.send(json.dumps({"type": "text", "text": word + " "}))
                    time.sleep(word_pause_s)
                ws.send(json.dumps({"type": "close"}))
            except ConnectionClosed:
                pass  # the server ended it while the text went out: what it said before closing is read below
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    session.outcome = "hung"
                    break
                try:
                    message = ws.recv(timeout=left)
                except TimeoutError:
                    session.outcome = "hung"
                    break
                except ConnectionClosed:
                    break
                if isinstance(message, bytes):
                    if not audio:
                        session.first_audio_at = time.time()
                    audio += message
                else:
                    session.events.append(json.loads(message))
            session.close_code = ws.close_code
    except (WebSocketException, OSError) as exc:
        session.outcome = "broken"
        session.events.append({"type": "error", "code": "client", "message": f"{type(exc).__name__}: {exc}"})
    session.ended_at = time.time()
    session.audio = bytes(audio)
    if session.outcome == "not run":
        done = any(event.get("type") == "session.done" for event in session.events)
        session.outcome = "complete" if session.close_code == 1000 and done and session.error is None else "error"
    return session


def whole_text_pcm(api_url: str, session: Session, timeout_s: float = 300.0) -> bytes | None:
    """The session's text submitted whole (PCM), retried through 503s: what the session's audio must equal (decoded in
    pieces, ``listen``, as the session's is: a chunk decoded whole differs by float rounding)."""
    body = {"text": session.text, "seed": session.seed, "voice": session.voice, "format": "pcm", "listen": True}
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=30) as http:
        while True:
            answer = http.post(f"{api_url}/v1/tts/submit", json=body)
            if answer.status_code in (200, 202):
                task_id = answer.json()["task_id"]
                break
            if time.monotonic() > deadline:
                return None
            time.sleep(float(answer.headers.get("retry-after", "1")))
        while time.monotonic() < deadline:
            result = http.get(f"{api_url}/v1/tts/result/{task_id}", params={"wait": 10})
            if result.status_code == 200 and result.headers.get("content-type", "").startswith("audio"):
                return result.content
            if result.status_code not in (200, 202, 503):
                return None
            time.sleep(0.2)
    return None
