"""Streams and realtime sessions against a real uvicorn API (``api_server.py``, as shipped): a session whose text no
worker is alive to speak is told ``no_worker`` and closed 1013, not left silent; an audio stream whose last worker
goes is broken off; one tenant's keys together hold at most ``MAX_STREAMS_PER_TENANT`` sessions and streams (4429
past it) while another tenant still opens both."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from settings import Settings
from tests.e2e.test_realtime import drain, session_url, start
from tests.support.service import ROOT, Service
from ttsq.store.connection import RedisClient, create_redis
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue

pytestmark = pytest.mark.e2e

HANG_GUARD_S = 60
"""Only a session that is never answered reaches it."""


def test_a_session_with_no_worker_alive_is_told_no_worker_and_closed_1013(service: Service) -> None:
    api = service.start_api("api-no-worker", NO_WORKER_S="2")  # HEARTBEAT_INTERVAL_S is 0.5 here; no worker started
    with connect(session_url(api), open_timeout=30) as ws:
        start(ws, voice="zh_female")
        ws.send(json.dumps({"type": "text", "text": "Nobody is here to say this sentence."}))
        ws.send(json.dumps({"type": "flush"}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "error":
            message = ws.recv(timeout=HANG_GUARD_S)
            assert isinstance(message, str), "no audio can come"
            events.append(json.loads(message))
        _, _, code = drain(ws)
    assert events[0]["type"] == "segment.queued", events
    assert events[-1]["code"] == "no_worker" and "NO_WORKER_S" in events[-1]["message"], events
    assert code == 1013
    task = httpx.get(f"{api}/v1/tts/tasks/{events[0]['task_id']}", timeout=30).json()
    assert task["status"] == "cancelled", "what the session queued does not wait for a worker nobody will hear"


def tenant_key(service: Service, tenant: str | None) -> str:
    extra = ["--tenant", tenant] if tenant else []
    result = subprocess.run(
        [sys.executable, "-m", "ttsq", "keys", "create", "--name", "limits", "--scopes", "tts", *extra],
        cwd=ROOT,
        env=service.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.splitlines()[0].strip()


def session(api: str, key: str) -> ClientConnection:
    """A session opened with ``key`` (in the handshake's header), its ``session.start`` sent; the caller closes it."""
    ws = connect(session_url(api), open_timeout=30, additional_headers={"Authorization": f"Bearer {key}"}).__enter__()
    ws.send(json.dumps({"type": "session.start"}))
    return ws


def test_one_tenants_keys_hold_at_most_its_share_and_another_tenant_still_opens_sessions_and_streams(service: Service) -> None:
    api = service.start_api(
        "api-tenants", AUTH="on", MAX_STREAMS="6", MAX_STREAMS_PER_KEY="2", MAX_STREAMS_PER_TENANT="3", REALTIME_IDLE_S="600"
    )
    acme = [tenant_key(service, "acme") for _ in range(3)]
    other = tenant_key(service, None)
    held = [session(api, key) for key in (acme[0], acme[0], acme[1])]
    try:
        for ws in held:
            assert json.loads(ws.recv(timeout=HANG_GUARD_S))["type"] == "session.started"
        for key in acme[1:]:
            with session(api, key) as refused:
                _, events, code = drain(refused)
            assert code == 4429 and events[-1]["code"] == "too_many_requests", events
            assert "MAX_STREAMS_PER_TENANT=3" in events[-1]["message"]

        with session(api, other) as theirs:
            assert json.loads(theirs.recv(timeout=HANG_GUARD_S))["type"] == "session.started"
            headers = {"Authorization": f"Bearer {other}"}
            task = httpx.post(f"{api}/v1/tts/submit", json={"text": "Theirs.", "seed": 5}, headers=headers, timeout=30)
            with httpx.stream("GET", f"{api}/v1/tts/events/{task.json()['task_id']}", headers=headers, timeout=30) as stream:
                assert stream.status_code == 200
                assert next(stream.iter_lines()).startswith("id: ")
    finally:
        for ws in held:
            ws.close()


def test_an_audio_stream_whose_last_worker_goes_is_broken_off_not_ended_as_if_whole(service: Service) -> None:
    """A raw audio body has no way to say "no worker" once it has started but an unfinished end: the connection is
    closed without the body's last chunk, so no client takes what it got for the whole audio (and the API logs one
    warning, not an error). The worker here is its heartbeat alone, written and taken away as a worker does."""
    api = service.start_api("api-worker-gone", NO_WORKER_S="2")
    task = httpx.post(f"{api}/v1/tts/submit", json={"text": "Nobody finishes this.", "seed": 4}, timeout=30).json()["task_id"]
    asyncio.run(_beat(service, "w-gone"))
    with httpx.stream("GET", f"{api}/v1/tts/stream/{task}?format=pcm", timeout=HANG_GUARD_S) as audio:
        assert audio.status_code == 200
        asyncio.run(_stop(service, "w-gone"))
        with pytest.raises(httpx.RemoteProtocolError):
            audio.read()
    log = service.log("api-worker-gone").decode()
    assert "the response was broken off: no worker is running" in log and " ERROR " not in log


def _heartbeats(service: Service) -> tuple[RedisClient, Heartbeats]:
    redis = create_redis(Settings(_env_file=None, redis_url=service.redis.url).redis_config())
    queue = JobQueue(redis, Settings(_env_file=None).queue_config())
    return redis, Heartbeats(redis, queue.shards, 15, queue.clock)


async def _beat(service: Service, worker: str) -> None:
    redis, beats = _heartbeats(service)
    await beats.write(worker, {"worker_id": worker})
    await redis.aclose()


async def _stop(service: Service, worker: str) -> None:
    redis, beats = _heartbeats(service)
    await beats.remove(worker)
    await redis.aclose()
