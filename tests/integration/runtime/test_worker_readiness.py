"""A worker is not ready before it has reached Redis: started while Redis is away, it never answers ``/readyz`` 200
in the moment between its model being warm and its first claim failing (that moment lasted 0.3–5 s, and an
orchestrator that looked then sent it traffic it could not serve)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx

from tests.conftest import queue_config
from tests.integration.runtime.test_worker import wait_until, worker_config
from tests.support.redis_server import free_port
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.runtime.health import HeartbeatRecord, health_app
from ttsq.runtime.worker import Worker
from ttsq.store.connection import RedisConfig, create_redis
from ttsq.store.queue import JobQueue


async def test_a_warm_worker_that_has_not_reached_redis_is_not_ready() -> None:
    record = HeartbeatRecord(worker_id="w", model_loaded=True, ready=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=health_app(record, 10.0)), base_url="http://w") as http:
        before = await http.get("/readyz")
        assert before.status_code == 503, before.text
        assert "has reached Redis yet" in before.json()["claiming"]
        record.last_heartbeat = time.time()  # its first heartbeat was written
        assert (await http.get("/readyz")).status_code == 200


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    """A TCP server that takes connections and never answers: a Redis that is not there yet, as a claim sees it
    for a whole socket timeout. Its connections are closed at the end, which ends every command waiting on them."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], held
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


async def test_a_worker_started_while_redis_does_not_answer_is_not_ready_once_its_model_is_warm(
    tiny_engine: ChatTTSEngine,
) -> None:
    """The real worker loop and probe server, the tiny engine, and a Redis address that takes connections but never
    answers (so its heartbeat and its first claim hang for the socket timeout instead of failing at once): once the
    model is loaded and warm, ``/readyz`` is still 503, saying nothing has reached Redis."""
    port = free_port()
    async with silent_server() as (redis_port, _held):
        redis = create_redis(RedisConfig(f"redis://127.0.0.1:{redis_port}/0", 30.0, 2.0, 8, 0))
        worker = Worker(JobQueue(redis, queue_config(block_s=0.2)), tiny_engine, worker_config(worker_health_port=port))
        task = asyncio.create_task(worker.run())
        try:
            await wait_until(lambda: _true(worker.record.ready), 120)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert "has reached Redis yet" in ready.json()["claiming"]
        finally:
            worker.request_stop()
    with contextlib.suppress(Exception):  # its claim fails now that the address is gone; the worker stops
        await asyncio.wait_for(task, 60)
    await redis.aclose()


async def _true(value: bool) -> bool:
    return value
