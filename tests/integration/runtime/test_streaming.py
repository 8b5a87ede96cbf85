"""Streaming: pieces published by the real worker, read back as they come, equal to the stored result."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
from redis.asyncio import Redis

from tests.conftest import FakeClock, api_client, claimed, listening, queue_config, task_id
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16, encode_audio
from ttsq.domain.encoders import open_ended_wav_header
from ttsq.domain.jobs import Status
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed
from ttsq.store.streams import AudioStreams, StreamFailed, pcm_pieces

LONG_TEXT = "First sentence here. Second one follows. Third comes next. Fourth is near the end. Fifth ends it."


def streams_of(queue: JobQueue) -> AudioStreams:
    """The audio streams beside ``queue`` (on its connection and names, expiring with its results)."""
    return AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)


async def collect(queue: JobQueue, job_id: str) -> list[bytes]:
    async with listening(queue) as listener:
        return [piece async for piece in pcm_pieces(streams_of(queue), listener, queue, job_id)]


async def test_streamed_audio_equals_the_stored_result(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    async with running_worker(redis, tiny_engine) as worker:
        job_id = task_id()
        # The job first, then its reader (as a client can only ask for a task it was given): a reader that ran
        # before the enqueue found no job and ended at once, empty — a race a loaded machine lost.
        await worker.queue.enqueue(job_id, params(LONG_TEXT, format="wav"), single_flight=False)
        reader = asyncio.create_task(collect(worker.queue, job_id))
        pieces = await asyncio.wait_for(reader, 60)
        job = await wait_final(worker.queue, job_id)
        stored = await worker.queue.result(job_id)
    assert job.status is Status.DONE and stored is not None
    assert len(pieces) >= 3, "one piece per sentence chunk"
    assert b"".join(pieces) == decode_to_pcm16(stored)
    assert await worker.streams.progress(job_id) == (len(pieces), len(pieces))


async def test_first_audio_is_published_before_the_job_finishes(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    """Server-side record, no client timing: the first piece's stream entry predates completion."""
    async with running_worker(redis, tiny_engine) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(LONG_TEXT), single_flight=False)
        job = await wait_final(worker.queue, job_id)
        entries: Any = await redis.xrange(worker.queue.keys.stream(job_id))
    first_piece_ms = int(entries[0][0].split(b"-")[0])
    assert job.finished_at is not None and first_piece_ms < job.finished_at * 1000


async def test_a_finished_job_without_a_stream_streams_its_stored_result(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    job_id = task_id()
    audio = encode_audio(np.linspace(-0.5, 0.5, 2400, dtype=np.float32), "flac")
    await queue.record_done(job_id, params(), audio, "audio/flac", 0.1)
    pieces = await collect(queue, job_id)
    assert b"".join(pieces) == decode_to_pcm16(audio)


async def test_a_failed_job_ends_its_stream_with_an_error(make_queue: Any) -> None:
    queue: JobQueue = make_queue(max_attempts=1)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    held = await claimed(queue)
    await queue.leases.fail(held.job, "inference failed: boom", retryable=False, cache_key=None)
    try:
        await collect(queue, job_id)
    except StreamFailed as exc:
        assert "boom" in str(exc)
    else:
        raise AssertionError("a failed job must not look like a finished stream")


async def test_a_retried_attempt_never_repeats_pieces_already_sent(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=10)
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    first = (await claimed(queue, "lost")).token
    for index in (0, 1):
        assert await streams.publish(job_id, first, index, 3, bytes([index]) * 4)
    received: list[bytes] = []
    first_two = asyncio.Event()

    async def read() -> None:
        async with listening(queue) as listener:
            async for piece in pcm_pieces(streams, listener, queue, job_id):
                received.append(piece)
                if len(received) == 2:
                    first_two.set()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(first_two.wait(), 10)
    clock.advance(11)  # the first worker's lease lapses; the job runs again elsewhere
    assert (await queue.leases.sweep(5.0, "sweeper")).requeued == 1
    retry = await claimed(queue, "w")
    for index in (0, 1, 2):
        assert await streams.publish(job_id, retry.token, index, 3, bytes([index]) * 4, fresh=index == 0)
    heard_s = 3 * 2 / SAMPLE_RATE  # its stored duration: the three pieces' samples, all streamed
    assert await queue.leases.complete(retry.job, b"RIFF", "audio/wav", heard_s, 0.1, cache_key=None) is Completed.DONE
    await asyncio.wait_for(reader, 10)
    assert received == [b"\0" * 4, b"\1" * 4, b"\2" * 4]


async def test_a_stale_owner_cannot_write_into_the_new_owners_stream(make_queue: Any, redis: Redis, clock: FakeClock) -> None:
    queue: JobQueue = make_queue(lease_s=10)
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    stale = (await claimed(queue, "stalled")).token
    clock.advance(11)
    await queue.leases.sweep(5.0, "sweeper")
    fresh = (await claimed(queue, "w")).token
    assert await streams.publish(job_id, fresh, 0, 2, b"\1\1", fresh=True)
    assert not await streams.publish(job_id, stale, 1, 2, b"\x09\x09"), "the stale owner's piece is refused"
    assert not await streams.publish(job_id, stale, 0, 2, b"\x09\x09", fresh=True), "and it cannot reset the stream"
    entries: Any = await redis.xrange(queue.keys.stream(job_id))
    assert [fields[b"pcm"] for _, fields in entries] == [b"\1\1"]


async def test_stream_and_events_endpoints(redis: Redis, tiny_engine: ChatTTSEngine, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        async with running_worker(redis, tiny_engine):
            submitted = (await client.post("/v1/tts/submit", json={"text": LONG_TEXT, "seed": 4})).json()
            job_id = submitted["task_id"]
            events = await client.get(f"/v1/tts/events/{job_id}")
        assert events.headers["content-type"].startswith("text/event-stream")
        statuses = [json.loads(line[5:]) for line in events.text.splitlines() if line.startswith("data:")]
        assert statuses[-1]["status"] == "done"
        assert statuses[-1]["chunks_done"] == statuses[-1]["chunks_total"] >= 3
        streamed = await client.get(f"/v1/tts/stream/{job_id}?format=pcm")
        stored = await client.get(f"/v1/tts/result/{job_id}")
        assert streamed.status_code == 200 and streamed.headers["content-type"] == "audio/pcm"
        assert streamed.content == decode_to_pcm16(stored.content)
        wav = await client.get(f"/v1/tts/stream/{job_id}")
        assert wav.content[:44] == open_ended_wav_header(SAMPLE_RATE) and wav.content[44:] == streamed.content
        status = (await client.get(f"/v1/tts/tasks/{job_id}")).json()
        assert status["chunks_done"] == status["chunks_total"] >= 3
        unknown = f"{task_id()}.AAAAAAAAAAAAAAAA"
        assert (await client.get(f"/v1/tts/stream/{unknown}")).status_code == 404
        assert (await client.get(f"/v1/tts/events/{unknown}")).status_code == 404, "a plain 404, not a broken event stream"
        failed = (await client.post("/v1/tts/submit", json={"text": "fails", "seed": 5})).json()["task_id"]
        queue = JobQueue(redis, queue_config())
        held = await claimed(queue)
        await queue.leases.fail(held.job, "inference failed: boom", retryable=False, cache_key=None)
        assert (await client.get(f"/v1/tts/stream/{failed}")).status_code == 409
