"""Audio delivery across a Redis restart, with real processes: every sample, or an error; never a success with a hole.

A real redis-server with its append-only file, restarted (SIGTERM, then started again on its port) while a job's audio
is streaming; a real uvicorn API and a real worker on the tiny checkpoint (``BATCH_INVARIANT``: an attempt's audio is
the same bits however often it runs). Redis stays down until the worker has made more audio, so pieces are published
(or were, before: skipped) while it is away.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.e2e.test_realtime import session_url, start, submitted_pcm
from tests.support.redis_server import server_binary
from tests.support.service import Service, Worker, wait_for
from ttsq.store.local_redis import start_redis_server

pytestmark = pytest.mark.e2e

# Five sentences, each over half of MAX_CHUNK_CHARS (40): a submit of the whole text cuts it where a session does.
SENTENCES = [
    "The first sentence is spoken here.",
    "The second one follows right after.",
    "Then a third one comes along.",
    "A fourth keeps the worker busy.",
    "And the fifth one ends it all.",
]
TEXT = " ".join(SENTENCES)
PIECES_WHILE_AWAY = 2
"""Pieces the worker makes while Redis is down, before Redis is started again."""


@pytest.fixture
def persistent(tmp_path: Path, tiny_checkpoint_dir: Path) -> Iterator[Service]:
    """A deployment whose Redis keeps its data across a restart (AOF), and whose API rides out an outage of up to a
    minute (``LISTEN_OUTAGE_S``), so that how long the test keeps Redis down never ends a stream by itself."""
    redis = start_redis_server(tmp_path / "redis", binary=server_binary(), persist=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_"))}
    env.update(
        REDIS_URL=redis.url,
        MODEL="tiny",
        CACHE_DIR=str(tmp_path / "cache"),
        TINY_CHECKPOINT_DIR=str(tiny_checkpoint_dir),
        DEVICE="cpu",
        BATCH_INVARIANT="true",
        MAX_NEW_TOKEN="384",
        MIN_NEW_TOKEN="384",
        MAX_CHUNK_CHARS="40",
        NORMALIZE_TEXT="false",
        REDIS_SOCKET_TIMEOUT_S="1.5",
        HEARTBEAT_INTERVAL_S="0.5",
        SWEEP_INTERVAL_S="0.5",
        BLOCK_S="0.5",
        LISTEN_BLOCK_S="0.5",
        LISTEN_OUTAGE_S="60",
        PYTHONUNBUFFERED="1",
    )
    service = Service(redis=redis, tmp=tmp_path, env=env)
    service.start_api()
    yield service
    service.kill_all()
    redis.stop()


def pieces_made(worker: Worker) -> float:
    """Pieces of streams the worker has handed on after their first (its ``ttsq_stream_slack_seconds`` count)."""
    found = re.search(r"^ttsq_stream_slack_seconds_count (\S+)$", worker.get("/metrics").text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def restart_redis_while_the_worker_makes_audio(service: Service, worker: Worker) -> None:
    """SIGTERM Redis (it writes its append-only file and exits), wait until the worker has made more audio, start it
    again on its port."""
    before = pieces_made(worker)
    service.redis.stop()
    try:
        wait_for(lambda: pieces_made(worker) >= before + PIECES_WHILE_AWAY, 60, "the worker to make audio while Redis is down")
    finally:
        service.redis.restart()


def test_a_stream_across_a_redis_restart_is_the_stored_result_and_a_session_across_one_is_whole_or_ends_in_an_error(
    persistent: Service,
) -> None:
    service = persistent
    worker = service.start_worker("outage")

    # /v1/tts/stream: the body is the stored result, sample for sample.
    # Followed from the start (``listen``): its audio comes in pieces, so the outage falls while they are being made.
    asked = {"text": TEXT, "format": "pcm", "seed": 3, "listen": True}
    task = httpx.post(f"{service.api_url}/v1/tts/submit", json=asked, timeout=30)
    assert task.status_code == 202, task.text
    task_id = task.json()["task_id"]
    body, errors, first = bytearray(), [], threading.Event()

    def listen() -> None:
        try:
            with httpx.stream("GET", f"{service.api_url}/v1/tts/stream/{task_id}?format=pcm", timeout=120) as response:
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    first.set()
        except httpx.HTTPError as exc:
            errors.append(exc)
        first.set()

    reader = threading.Thread(target=listen)
    reader.start()
    assert first.wait(120) and not errors, errors
    assert service.status(task_id)["status"] == "running", "the outage must come while the job's audio is being made"
    restart_redis_while_the_worker_makes_audio(service, worker)
    reader.join(180)
    assert not reader.is_alive() and not errors, errors
    service.wait_status(task_id, {"done"})
    stored = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", timeout=30).content
    assert len(body) == len(stored) and body == stored, f"streamed {len(body)} bytes of {len(stored)}: a hole"

    # A realtime session: its audio is the text's submitted whole, or it says it went wrong.
    with connect(session_url(service.api_url), open_timeout=30) as ws:
        start(ws, voice="zh_female", seed=9)
        ws.send(json.dumps({"type": "text", "text": TEXT}))
        ws.send(json.dumps({"type": "close"}))
        audio, events = bytearray(), []
        try:
            while not audio:
                message = ws.recv(timeout=120)
                audio += message if isinstance(message, bytes) else b""
                events += [] if isinstance(message, bytes) else [json.loads(message)]
            restart_redis_while_the_worker_makes_audio(service, worker)
            while True:
                message = ws.recv(timeout=180)
                audio += message if isinstance(message, bytes) else b""
                events += [] if isinstance(message, bytes) else [json.loads(message)]
        except ConnectionClosed:
            pass
        code = ws.close_code
    failed = code != 1000 or any(event["type"] == "error" for event in events)
    if not failed:
        whole = submitted_pcm(service, TEXT, voice="zh_female", seed=9)
        assert events[-1]["type"] == "session.done"
        assert len(audio) == len(whole) and audio == whole, f"a session that ended well has {len(audio)} bytes of {len(whole)}"
