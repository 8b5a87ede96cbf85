"""Realtime sessions (``/v1/tts/realtime``) against the real app, served by a real uvicorn in the test's own process, on
a real redis-server, with a real WebSocket client (``websockets``): what a client may do to a session, and what Redis
may do under it. No worker: where a chunk needs audio, the test plays the worker through the queue's own calls (claim,
publish, complete), as ``tests/unit/store/test_listener.py`` does; the session with a real worker is ``tests/e2e/test_realtime.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from redis.asyncio import Redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode

from settings import Settings
from tests.conftest import claimed, queue_config, settings
from tests.integration.api.test_security import new_key
from tests.support.redis_server import server_binary
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.keys import Keys
from ttsq.store.local_redis import start_redis_server
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

GUARD_S = 60.0
"""The longest any one wait of these tests may take: a condition that is not met by then fails the test."""


@dataclass
class Traffic:
    """What passed between the server and the app on each WebSocket: messages the app was handed (``received``) and
    the sends it started (``sent``), and the most received-but-not-answered there ever were."""

    received: int = 0
    sent: int = 0
    sending: int = 0
    """Sends started and not over: one is seen here only when it waits (the socket takes no more)."""
    most_unanswered: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "websocket":
                await app(scope, receive, send)
                return

            async def receiving() -> Message:
                message = await receive()
                if message["type"] == "websocket.receive":
                    self.received += 1
                    self.most_unanswered = max(self.most_unanswered, self.received - self.sent)
                    self.changed.set()
                return message

            async def sending(message: Message) -> None:
                if message["type"] != "websocket.send":
                    await send(message)
                    return
                self.sent += 1
                self.sending += 1
                self.changed.set()
                try:
                    await send(message)
                finally:
                    self.sending -= 1
                    self.changed.set()

            await app(scope, receiving, sending)

        return counted

    async def until(self, condition: Callable[[], bool]) -> None:
        async def waiting() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(waiting(), GUARD_S)


def small_socket(buffer_bytes: int) -> socket.socket:
    """A TCP socket whose kernel buffers hold ``buffer_bytes`` each way (no autotuning): what a server or client will not
    read backs up after that little, instead of after megabytes of loopback buffers."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    return sock


@asynccontextmanager
async def served(
    config: Settings, wrap: Callable[[ASGIApp], ASGIApp] | None = None, buffer_bytes: int | None = None
) -> AsyncIterator[tuple[str, FastAPI]]:
    """The app (lifespan included) under a real uvicorn on a free port of this process; yields the session URL.
    ``buffer_bytes``: the kernel buffers of its connections (:func:`small_socket`; accepted sockets inherit them)."""
    from app import create_app

    app = create_app(config)
    listening = small_socket(buffer_bytes) if buffer_bytes else socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(wrap(app) if wrap else app, lifespan="on", log_config=None, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        async with asyncio.timeout(GUARD_S):
            while not server.started:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.01)
        yield f"ws://127.0.0.1:{port}/v1/tts/realtime", app
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, GUARD_S)


async def started(ws: ClientConnection, **options: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "session.start", **options}))
    event = json.loads(await asyncio.wait_for(ws.recv(), GUARD_S))
    assert event["type"] == "session.started", event
    return dict(event)


async def drain(ws: ClientConnection) -> tuple[bytes, list[dict[str, Any]], int | None]:
    """Everything until the server closes: the audio, the events, the close code."""
    audio, events = bytearray(), []
    with contextlib.suppress(ConnectionClosed):
        while True:
            message = await asyncio.wait_for(ws.recv(), GUARD_S)
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message))
    return bytes(audio), events, ws.close_code


async def next_event(ws: ClientConnection, kind: str) -> dict[str, Any]:
    while True:
        message = await asyncio.wait_for(ws.recv(), GUARD_S)
        if isinstance(message, str) and (event := json.loads(message))["type"] == kind:
            return dict(event)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_key_in_the_handshake_is_checked_before_the_websocket_is_accepted(redis: Redis, make_settings: Any) -> None:
    """A refused key gets the HTTP answer (401, 403 with ``{"detail"}``) and never a session, so nothing it sends is read."""
    async with served(make_settings(auth="on")) as (url, _app):
        store = ApiKeyStore(redis, Keys("ttsq"))
        revoked, record = await store.create("gone", ["tts"])
        await store.revoke(record.id)
        metrics_only = await new_key(redis, "metrics")
        for headers, status, said in [
            (bearer(revoked), 401, "not valid"),
            ({"X-API-Key": "ttsq_nothing_here"}, 401, "not valid"),
            (bearer(metrics_only), 403, "'tts' scope"),
        ]:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, additional_headers=headers, open_timeout=GUARD_S):
                    pass
            response = refused.value.response
            assert response.status_code == status and said in json.loads(response.body)["detail"], (status, response.body)
        assert refused.value.response.headers.get("WWW-Authenticate") is None  # a 403
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, additional_headers=bearer(revoked), open_timeout=GUARD_S):
                pass
        assert refused.value.response.headers["WWW-Authenticate"].startswith("Bearer")

        valid = await new_key(redis, "tts")
        async with connect(url, additional_headers={"X-API-Key": valid}, open_timeout=GUARD_S) as ws:
            await started(ws)
        async with connect(url, open_timeout=GUARD_S) as ws:  # no key in the handshake: the first message may bring one
            await started(ws, api_key=valid)


async def test_a_connection_that_sends_no_session_start_is_closed_within_realtime_start_s(make_settings: Any) -> None:
    config = make_settings(realtime_start_s=0.3, realtime_idle_s=3600)
    async with served(config) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        _, events, code = await drain(ws)  # never sends a thing
    assert code == 4408 and events[-1]["code"] == "timeout" and "REALTIME_START_S" in events[-1]["message"], events


async def test_duplicate_keys_are_refused_as_the_http_routes_refuse_them(make_settings: Any) -> None:
    async with served(make_settings()) as (url, _app):
        async with connect(url, open_timeout=GUARD_S) as ws:
            await ws.send('{"type": "session.start", "seed": 1, "seed": 2}')
            _, events, code = await drain(ws)
        assert code == 4400 and "'seed' appears more than once" in events[-1]["message"], events

        async with connect(url, open_timeout=GUARD_S) as ws:
            await started(ws)
            await ws.send('{"type": "text", "text": "Say this.", "text": "Say that."}')
            refused = json.loads(await asyncio.wait_for(ws.recv(), GUARD_S))
            assert refused["code"] == "invalid_message" and "'text' appears more than once" in refused["message"], refused
            await ws.send('{"type": "keepalive"}')  # a keep-alive is a message of its own: answered by nothing
            await ws.send('{"type": "cancel"}')
            _, events, code = await drain(ws)
    assert code == 1000 and [event["type"] for event in events] == ["session.done"], events


async def test_a_flood_of_messages_to_a_session_whose_client_reads_nothing_holds_at_most_its_inbox(make_settings: Any) -> None:
    """A client sends far more messages than the session can answer and reads none of the answers: the session waits on
    its first answer the socket cannot take, its inbox fills, and the server reads nothing more — TCP holds the client
    back — so the app was never handed more than its inbox (and the two in hand) beyond what it answered. Once the
    client reads, the session and the reading go on."""
    inbox = 8
    traffic = Traffic()
    async with served(make_settings(realtime_inbox_messages=inbox), traffic.wrap, buffer_bytes=8192) as (url, _app):
        client = small_socket(8192)
        client.connect(("127.0.0.1", int(url.split(":")[2].split("/")[0])))
        client.setblocking(False)
        ws = await connect(url, sock=client, open_timeout=GUARD_S, max_queue=1, write_limit=2**30)
        await started(ws)
        # Written straight into the client's buffer, without waiting for it to drain: what stays there is what the
        # server would not read. Each is an unknown type, answered with an error event that echoes it.
        flood = 100_000
        frame = Frame(Opcode.TEXT, json.dumps({"type": "x" * 40}).encode()).serialize(mask=True, extensions=[])
        ws.transport.write(frame * flood)
        await traffic.until(
            lambda: (
                traffic.sending > 0  # the session waits on its socket (an answer the client does not read)
                and traffic.received - traffic.sent >= inbox + 1
            )  # and its inbox is full
        )
        assert traffic.received - traffic.sent <= inbox + 2, "the server went on reading a flood it did not answer"
        assert ws.transport.get_write_buffer_size() > 0, "TCP holds the rest back, client-side"
        held = traffic.received
        while traffic.received <= held:  # the client reads: once its backlog is read, the session answers, the server reads
            assert json.loads(await asyncio.wait_for(ws.recv(), GUARD_S))["code"] == "invalid_message"
        ws.transport.abort()
        await asyncio.wait_for(ws.wait_closed(), GUARD_S)
    assert traffic.most_unanswered <= inbox + 2, traffic


async def test_a_revoked_key_ends_a_session_after_its_close_and_nothing_more_is_queued(redis: Redis, make_settings: Any) -> None:
    """After ``close`` the session waits for its chunks' audio (no worker here): its key is still rechecked, and a
    revocation ends it (4401) instead of its queuing the rest under the revoked key."""
    config = make_settings(auth="on", stream_key_recheck_s=0.1, realtime_max_s=120)
    store = ApiKeyStore(redis, Keys("ttsq"))
    key, record = await store.create("speaker", ["tts"])
    async with served(config) as (url, _app), connect(url, additional_headers=bearer(key), open_timeout=GUARD_S) as ws:
        await started(ws, seed=3)
        await ws.send(json.dumps({"type": "text", "text": "One sentence here. Another one there. A third at last."}))
        await ws.send(json.dumps({"type": "close"}))
        first = await next_event(ws, "segment.queued")
        await ws.send(json.dumps({"type": "keepalive"}))
        assert (await next_event(ws, "error"))["code"] == "closing", "the session has taken its close"
        await store.revoke(record.id)
        _, events, code = await drain(ws)
    assert code == 4401 and events[-1]["code"] == "unauthorized", events
    assert not [event for event in events if event["type"] == "segment.queued"], "queued under a revoked key"
    job = await JobQueue(redis, queue_config()).get(first["task_id"])
    assert job is not None and job.status.value == "cancelled", "its chunk is abandoned: nobody else wanted it"


async def test_a_session_rides_out_a_redis_restart_during_a_submit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Redis goes away as a session submits a chunk and comes back within ``LISTEN_OUTAGE_S``: the submit is tried again
    and the session goes on. Past ``LISTEN_OUTAGE_S``, an ``error`` and 1013."""
    server = start_redis_server(tmp_path / "redis", binary=server_binary(), persist=True, args=("--appendfsync", "always"))
    config = settings(redis_url=server.url, model="tiny", cache_dir=tmp_path / "cache", listen_outage_s=60, redis_retries=1)
    caplog.set_level(logging.INFO, "ttsq.api.realtime")
    try:
        async with served(config) as (url, _app):
            async with connect(url, open_timeout=GUARD_S) as ws:
                await started(ws, seed=5)
                server.stop()
                await ws.send(json.dumps({"type": "text", "text": "Said while Redis is away. And"}))

                def submit_failed() -> bool:
                    return any("could not queue a chunk: Redis unavailable" in r.getMessage() for r in caplog.records)

                async with asyncio.timeout(GUARD_S):
                    while not submit_failed():  # noqa: ASYNC110 - the app's log is what says the submit met the outage
                        await asyncio.sleep(0.05)
                server.restart()
                queued = await next_event(ws, "segment.queued")
                assert queued["text"] == "Said while Redis is away."
                await ws.send(json.dumps({"type": "cancel"}))
                _, events, code = await drain(ws)
            assert code == 1000 and events[-1]["type"] == "session.done", events

        short = settings(redis_url=server.url, model="tiny", cache_dir=tmp_path / "cache", listen_outage_s=0.3, redis_retries=1)
        async with served(short) as (url, _app):
            async with connect(url, open_timeout=GUARD_S) as ws:
                await started(ws, seed=5)
                server.stop()
                await ws.send(json.dumps({"type": "text", "text": "Said while Redis is away for good. And"}))
                _, events, code = await drain(ws)
            assert code == 1013 and events[-1]["code"] == "unavailable", events
            server.restart()
    finally:
        server.stop()


async def test_an_idle_session_says_what_it_never_spoke(make_settings: Any) -> None:
    """A session's own ``idle_s`` (within ``REALTIME_IDLE_S``) ends it; the text not yet spoken comes back in the error."""
    async with served(make_settings(realtime_idle_s=30, realtime_clause_wait_s=30)) as (url, _app):
        async with connect(url, open_timeout=GUARD_S) as ws:
            await ws.send(json.dumps({"type": "session.start", "idle_s": 31}))
            _, events, code = await drain(ws)
        assert code == 4400 and "REALTIME_IDLE_S" in events[-1]["message"], events

        async with connect(url, open_timeout=GUARD_S) as ws:
            assert (await started(ws, idle_s=0.2))["idle_s"] == 0.2
            await ws.send(json.dumps({"type": "text", "text": "Let me look that up for"}))  # then a pause: a tool call
            _, events, code = await drain(ws)
    assert code == 4408 and events[-1]["unspoken"] == "Let me look that up for", events
    assert "not spoken" in events[-1]["message"] and "keepalive" in events[-1]["message"]


async def test_a_client_that_goes_away_at_any_point_logs_no_error(
    redis: Redis, make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Clients that drop their connection (no close frame) before the start, after it, while their answers back up,
    and while their audio streams: each session ends quietly, its slot freed and its chunk abandoned."""
    caplog.set_level(logging.WARNING)
    config = make_settings(realtime_inbox_messages=4)
    async with served(config) as (url, app):
        slots = app.state.service.listening.stream_slots

        async def dropped(work: Callable[[ClientConnection], Any]) -> None:
            ws = await connect(url, open_timeout=GUARD_S, max_queue=1)
            await work(ws)
            ws.transport.abort()
            await asyncio.wait_for(ws.wait_closed(), GUARD_S)

        async def nothing(ws: ClientConnection) -> None:
            pass

        async def after_start(ws: ClientConnection) -> None:
            await started(ws)

        async def flooding(ws: ClientConnection) -> None:
            await started(ws)
            ws.transport.write(Frame(Opcode.TEXT, b'{"type": "x"}').serialize(mask=True, extensions=[]) * 20_000)

        queue = JobQueue(redis, queue_config())
        streams = AudioStreams(redis, queue.shards, 60)

        async def streaming(ws: ClientConnection) -> None:
            await started(ws, seed=9)
            await ws.send(json.dumps({"type": "text", "text": "A sentence with audio on its way. And"}))
            queued = await next_event(ws, "segment.queued")
            held = await claimed(queue)
            assert held.job.id == queued["task_id"]
            assert await streams.publish(held.job.id, held.token, 0, 3, b"\0\1" * 2400)
            assert isinstance(await asyncio.wait_for(ws.recv(), GUARD_S), bytes)
            assert await streams.publish(held.job.id, held.token, 1, 3, b"\0\1" * 240_000)  # more than the socket takes

        for work in (nothing, after_start, flooding, streaming):
            await dropped(work)
            async with asyncio.timeout(GUARD_S):
                while slots.open:  # noqa: ASYNC110 - the session's slot is what says it has ended
                    await asyncio.sleep(0.02)
        gc.collect()  # an exception of a task nobody awaited is reported when the task is collected
        await asyncio.sleep(0)
    problems = [f"{r.name} {r.levelname}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert problems == [], problems


async def test_a_session_holds_one_of_the_stream_slots_the_http_streams_hold_and_gives_it_back(
    redis: Redis, make_settings: Any
) -> None:
    """A session takes the same stream slots as the streaming routes (``ListeningService.open_session``), counted as a
    ``session``: past its caller's share (``MAX_STREAMS_PER_KEY``) another is ``too_many_requests`` (4429), and once it
    ends, its slot is back."""
    async with served(make_settings(auth="on", max_streams_per_key=1)) as (url, app):
        slots = app.state.service.listening.stream_slots
        key = await new_key(redis, "tts")
        async with connect(url, additional_headers=bearer(key), open_timeout=GUARD_S) as first:
            await started(first)
            assert (slots.open, slots.counts().by_kind["session"]) == (1, 1)
            async with connect(url, additional_headers=bearer(key), open_timeout=GUARD_S) as second:
                await second.send(json.dumps({"type": "session.start"}))
                _, events, code = await drain(second)
            assert code == 4429 and "MAX_STREAMS_PER_KEY=1" in events[-1]["message"], events
        async with asyncio.timeout(GUARD_S):
            while slots.open:  # noqa: ASYNC110 - the session's slot is what says it has ended
                await asyncio.sleep(0.02)
