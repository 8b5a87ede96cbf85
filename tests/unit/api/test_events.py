"""``GET /v1/tts/events/{id}``: ``timing`` events, SSE ids and ``Last-Event-ID``, pushed through the process's listener.

The job is run by the queue's own scripts (as a worker runs it) on a real redis-server; the app is the real one,
lifespan (and so its listener) included.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from redis.asyncio import Redis

from tests.conftest import claimed, queue_config
from tests.unit.api.test_query import queued_task
from ttsq.api.auth import Principal
from ttsq.api.service import TTSService
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

SPOKEN = [(0, 2400, "One."), (5280, 7680, "Two."), (10560, 12960, "Three.")]
"""Each piece's chunk: where its speech lies in the joined audio (samples) and its text."""


def events(body: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of every server-sent event in ``body``."""
    parsed = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        parsed.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return parsed


async def run_three_pieces(redis: Redis) -> None:
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)
    streams = AudioStreams(redis, queue.shards, 60)
    for index, spoken in enumerate(SPOKEN):
        assert await streams.publish(held.job.id, held.token, index, 3, b"\0\0" * 10, spoken=spoken)
    await queue.leases.complete(held.job, b"RIFF", "audio/wav", 0.5, 0.1, cache_key=None)


async def test_timing_events_say_where_each_chunk_lies_and_every_event_has_an_id(client: httpx.AsyncClient, redis: Redis) -> None:
    task = await queued_task(client)
    await run_three_pieces(redis)
    sent = events((await client.get(f"/v1/tts/events/{task}")).text)
    timings = [data for _, kind, data in sent if kind == "timing"]
    assert [(t["index"], t["start"], t["end"], t["text"]) for t in timings] == [(i, *s) for i, s in enumerate(SPOKEN)]
    assert timings[1]["start_s"] == 5280 / 24000 and timings[1]["end_s"] == 7680 / 24000
    assert sent[-1][1] == "status" and sent[-1][2]["status"] == "done"
    ids = [entry_id for entry_id, _, _ in sent]
    assert all(ids) and ids == sorted(ids, key=lambda i: tuple(int(n) for n in i.split("-")))


async def test_last_event_id_resumes_after_it_with_no_timing_event_repeated(client: httpx.AsyncClient, redis: Redis) -> None:
    task = await queued_task(client)
    await run_three_pieces(redis)
    first = events((await client.get(f"/v1/tts/events/{task}")).text)
    first_timing_id = next(entry_id for entry_id, kind, _ in first if kind == "timing")
    resumed = events((await client.get(f"/v1/tts/events/{task}", headers={"Last-Event-ID": first_timing_id})).text)
    assert [data["index"] for _, kind, data in resumed if kind == "timing"] == [1, 2]
    assert resumed[-1][2]["status"] == "done"


async def test_a_queued_task_streams_running_pieces_and_its_end_live(client: httpx.AsyncClient, redis: Redis) -> None:
    """The stream is opened while the task waits; its attempt starting, its pieces and its end arrive as they happen."""
    task = await queued_task(client)
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    service: TTSService = transport.app.state.service  # type: ignore[attr-defined]
    reading = asyncio.ensure_future(client.get(f"/v1/tts/events/{task}"))
    while not service.listener.following(task):  # noqa: ASYNC110 - the listener's state, no event of ours
        await asyncio.sleep(0.01)
    await run_three_pieces(redis)
    sent = events((await asyncio.wait_for(reading, 60)).text)
    statuses = [(data["status"], data["chunks_done"]) for _, kind, data in sent if kind == "status"]
    assert statuses[0] == ("queued", None) and statuses[-1] == ("done", 3)
    assert ("running", 3) in statuses
    assert [data["index"] for _, kind, data in sent if kind == "timing"] == [0, 1, 2]


async def test_a_piece_gives_its_timing_and_status_events_in_one_batch(client: httpx.AsyncClient, redis: Redis) -> None:
    """What one read of the task's stream gives is handed to the route at once, so that it is written with one system
    call: a thousand clients of one process otherwise cost two writes each per piece, and the writes are about a third of
    the time from a piece's publication to the clients' first byte (``bench.listening.listeners``)."""
    task = await queued_task(client)
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    service: TTSService = transport.app.state.service  # type: ignore[attr-defined]
    caller = Principal(None, "127.0.0.1")
    queue = JobQueue(redis, queue_config())
    held = await claimed(queue)
    streams = AudioStreams(redis, queue.shards, 60)
    batches = service.listening.events(await service.tasks.job(task, caller), caller)
    first = await anext(batches)
    assert [event.kind for event in first] == ["status"] and first[0].data["status"] == "running"
    assert await streams.publish(held.job.id, held.token, 0, 3, b"\0\0" * 10, spoken=SPOKEN[0])
    piece = await asyncio.wait_for(anext(batches), 30)
    assert [(event.kind, event.data.get("index"), event.data.get("chunks_done")) for event in piece] == [
        ("timing", 0, None),
        ("status", None, 1),
    ]
    await batches.aclose()
