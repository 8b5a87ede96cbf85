"""A realtime context is one stream to the queue and the workers: each of its chunks' job records carries the stream's
id and the chunk's place in it, and a chunk after the first continues the stream (the queue's continuation lane) with
what the API had counted of its listener's audio. The real app under a real uvicorn, a real redis-server, a real
WebSocket client; the test plays the worker through the queue's own calls."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from websockets.asyncio.client import connect

from tests.integration.api.test_realtime_contexts import Worker, event, pcm, send
from tests.integration.api.test_realtime_session import GUARD_S, served, started
from ttsq.domain.audio import SAMPLE_RATE


async def test_a_contexts_second_chunk_continues_its_stream_and_its_first_does_not(redis: Redis, make_settings: Any) -> None:
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, seed=3, audio_transport="json")
        await send(ws, "context.start", context_id="talk")
        assert (await event(ws))["type"] == "context.started"
        await send(ws, "text", context_id="talk", text="The first sentence is here. The second one follows it.")
        await send(ws, "flush", context_id="talk")
        first = await event(ws)
        assert first["type"] == "segment.queued" and first["index"] == 0, first
        record = await worker.queue.get(first["task_id"])
        assert record is not None and record.params.stream is not None
        place = record.params.stream
        assert (place.chunk, place.continues, place.buffered_s) == (0, False, 0.0), "nothing heard yet"
        assert record.lane == "interactive", "a new stream's first chunk waits with the new work"
        await worker.claim(1)
        await worker.speak(first["task_id"], pcm(2))  # its first audio goes out: the next chunk is queued
        second = None
        while second is None:
            said = await event(ws)
            second = said if said["type"] == "segment.queued" else None
        assert second["index"] == 1
        record = await worker.queue.get(second["task_id"])
        assert record is not None and record.params.stream is not None
        following = record.params.stream
        assert following.id == place.id and following.chunk == 1 and following.continues
        assert following.buffered_s <= 2400 / SAMPLE_RATE, "at most the audio sent so far is left to play"
        assert record.lane == "continuation"
