"""The API's one stream listener (:mod:`ttsq.store.listener`) on a real redis-server: fan-out, and a Redis restart.

No test times anything: each waits on a condition (a subscriber has what it should), with a generous guard that
only a hang reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from tests.conftest import claimed, listening, params, queue_config, task_id
from tests.support.redis_server import server_binary
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.store.connection import RedisConfig, create_redis
from ttsq.store.listener import JobListener
from ttsq.store.local_redis import RedisServer, start_redis_server
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed
from ttsq.store.streams import AudioStreams, pcm_pieces

GUARD_S = 60
"""Only a hang reaches it."""


async def until(condition: asyncio.Event) -> None:
    await asyncio.wait_for(condition.wait(), GUARD_S)


@contextlib.asynccontextmanager
async def persistent_redis(tmp_path: Path) -> AsyncIterator[tuple[RedisServer, Redis]]:
    """A redis-server whose every write is on disk before it answers (``appendfsync always``), so a SIGKILL loses nothing
    and what the listener must ride out is the outage alone."""
    server = start_redis_server(tmp_path, binary=server_binary(), persist=True, args=("--appendfsync", "always"))
    client = create_redis(RedisConfig(server.url, socket_timeout_s=2.0, connect_timeout_s=0.5, max_connections=8, retries=2))
    assert isinstance(client, Redis)
    try:
        yield server, client
    finally:
        await client.aclose()
        server.stop()


class Reader:
    """One audio client: every piece ``pcm_pieces`` yields, and an event set once it has ``expected`` of them."""

    def __init__(self, listener: JobListener, queue: JobQueue, job_id: str, expected: int) -> None:
        self.pieces: list[bytes] = []
        self.first = asyncio.Event()
        self.expected = expected
        streams = AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)
        self.task = asyncio.create_task(self._read(pcm_pieces(streams, listener, queue, job_id)))

    async def _read(self, pieces: AsyncIterator[bytes]) -> None:
        async for piece in pieces:
            self.pieces.append(piece)
            if len(self.pieces) == self.expected:
                self.first.set()


class Follower:
    """One raw subscription: every stream entry the listener hands it, until the end marker."""

    def __init__(self, listener: JobListener, job_id: str) -> None:
        self.ids: list[str] = []
        self.task = asyncio.create_task(self._follow(listener, job_id))

    async def _follow(self, listener: JobListener, job_id: str) -> None:
        async with listener.follow(job_id) as subscription:
            entries = subscription.backlog
            while True:
                self.ids += [entry_id for entry_id, _ in entries]
                if any("end" in fields for _, fields in entries):
                    return
                entries = (await subscription.next()).entries


async def test_one_piece_reaches_every_subscriber_of_its_job_once(redis: Redis) -> None:
    queue = JobQueue(redis, queue_config())
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    streams = AudioStreams(redis, queue.shards, 60)
    async with listening(queue) as listener:
        readers = [Reader(listener, queue, job_id, 2) for _ in range(20)]
        while listener.listening() < len(readers):  # noqa: ASYNC110 - the listener's state, no event of ours
            await asyncio.sleep(0.01)
        for index in range(2):
            assert await streams.publish(job_id, held.token, index, 2, bytes([index + 1]) * 4)
        await queue.leases.complete(held.job, b"RIFF", "audio/wav", 4 / SAMPLE_RATE, 0.1, cache_key=None)  # the pieces' samples
        await asyncio.wait_for(asyncio.gather(*(reader.task for reader in readers)), GUARD_S)
    assert all(reader.pieces == [b"\1" * 4, b"\2" * 4] for reader in readers)


async def test_listeners_ride_out_a_redis_sigkill_and_restart_with_no_lost_or_repeated_piece(tmp_path: Path) -> None:
    """Twenty audio clients and twenty raw subscribers follow one job; Redis is SIGKILLed after two pieces and started
    again on its port; three more pieces and the end follow. Every audio client gets each of the five pieces exactly
    once, in order, and every subscriber each stream entry exactly once, in order (the listener resumed from its last
    id: it neither missed nor re-read one)."""
    async with persistent_redis(tmp_path) as (server, client):
        queue = JobQueue(client, queue_config())
        job_id = task_id()
        await queue.enqueue(job_id, params(), single_flight=False)
        held = await claimed(queue)
        streams = AudioStreams(client, queue.shards, 60)
        pieces = [bytes([index + 1]) * 4 for index in range(5)]
        outage = asyncio.Event()
        async with listening(queue, block_s=0.5, on_outage=outage.set) as listener:
            readers = [Reader(listener, queue, job_id, 2) for _ in range(20)]
            followers = [Follower(listener, job_id) for _ in range(20)]
            while listener.listening() < len(readers) + len(followers):  # noqa: ASYNC110 - the listener's state
                await asyncio.sleep(0.01)
            for index in range(2):
                assert await streams.publish(job_id, held.token, index, 5, pieces[index])
            for reader in readers:
                await until(reader.first)

            server.process.send_signal(signal.SIGKILL)
            server.process.wait()
            await until(outage)  # the listener's read failed (past redis-py's own quick retries): it must resume by itself
            server.restart()
            while True:  # until the restarted server answers (it replays its append-only file first)
                with contextlib.suppress(Exception):
                    if await client.ping():
                        break
                await asyncio.sleep(0.05)

            for index in range(2, 5):
                assert await streams.publish(job_id, held.token, index, 5, pieces[index])
            heard_s = 10 / SAMPLE_RATE  # the five pieces' samples
            assert await queue.leases.complete(held.job, b"RIFF", "audio/wav", heard_s, 0.1, cache_key=None) is Completed.DONE
            await asyncio.wait_for(asyncio.gather(*(r.task for r in readers), *(f.task for f in followers)), GUARD_S)
            stream: Any = await client.xrange(queue.keys.stream(job_id))
            logged = [entry_id.decode() for entry_id, _ in stream]
    assert all(reader.pieces == pieces for reader in readers), [len(reader.pieces) for reader in readers]
    assert len(logged) == 7, "running, five pieces, end"
    assert all(follower.ids == logged for follower in followers), [len(follower.ids) for follower in followers]
