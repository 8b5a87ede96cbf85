"""Audio delivery without holes: what a reader passes on is a prefix of the job's stored audio, whatever was missed.

The reader (:func:`ttsq.store.streams.pcm_pieces`, which every streaming route reads) on crafted stream entries in a real
Redis: a piece that starts past what the reader has passed on is held back, and the hole is filled from a re-run
attempt's pieces or from the stored result at the reader's offset, or the stream ends with :class:`StreamGap`. The
worker's side (:meth:`ttsq.runtime.outcomes.Outcomes.publish`): pieces Redis cannot take for a while are kept and land
in order. The listener's own reads ride a Redis outage out as a pause (:meth:`JobListener.read`).
"""

from __future__ import annotations

import asyncio
import hashlib
from importlib.resources import files
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, api_client, claimed, listening, params, queue_config, settings, task_id
from tests.integration.runtime.test_streaming import LONG_TEXT
from tests.integration.runtime.test_worker import proxied, running_worker, wait_final
from tests.support.redis_server import RedisServer, free_port
from tests.unit.api.test_query import queued_task
from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16, encode_audio
from ttsq.domain.jobs import Status
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.store.connection import create_redis
from ttsq.store.listener import Entry, JobListener, ListenerConfig, ListenerOutage
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed
from ttsq.store.streams import EXACT_FORMATS, AudioCursor, AudioStreams, StreamFailed, StreamGap, pcm_pieces

GUARD_S = 30
"""Only a hang reaches it."""

AUDIO = encode_audio(np.sin(np.arange(3000, dtype=np.float32) / 7) * 0.5, "pcm")
"""A job's whole audio as its worker streams it: 3000 samples of PCM16."""


def samples(start: int, end: int) -> bytes:
    """Samples [start, end) of :data:`AUDIO`."""
    return AUDIO[2 * start : 2 * end]


def streams_of(queue: JobQueue) -> AudioStreams:
    return AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)


class Reader:
    """One listener of a job through ``pcm_pieces``: what it received, and how it ended."""

    def __init__(self, queue: JobQueue, listener: JobListener, job_id: str) -> None:
        self.received = bytearray()
        self.error: StreamFailed | None = None
        self.task = asyncio.create_task(self._read(queue, listener, job_id))

    async def _read(self, queue: JobQueue, listener: JobListener, job_id: str) -> None:
        try:
            async for piece in pcm_pieces(streams_of(queue), listener, queue, job_id):
                self.received += piece
        except StreamFailed as exc:
            self.error = exc

    async def has(self, count: int) -> None:
        """Until it has received ``count`` bytes."""
        async with asyncio.timeout(GUARD_S):
            while len(self.received) < count:  # noqa: ASYNC110 - a reader of our own, no event to wait on
                await asyncio.sleep(0.01)

    async def ended(self) -> None:
        await asyncio.wait_for(self.task, GUARD_S)


async def lapse_and_claim_again(queue: JobQueue, clock: FakeClock) -> int:
    """The first claim's lease lapses (its worker lost Redis, or died); the job is claimed again: the new token."""
    clock.advance(queue.config.lease_s + 1)
    assert (await queue.leases.sweep(5.0, "sweeper")).requeued == 1
    return (await claimed(queue, "second")).token


async def complete(queue: JobQueue, job_id: str, stored: bytes, fmt: str) -> None:
    job = await queue.get(job_id)
    assert job is not None
    done = await queue.leases.complete(job, stored, f"audio/{fmt}", len(AUDIO) / 2 / SAMPLE_RATE, 0.1, cache_key=None)
    assert done is Completed.DONE


# ---- the reader's cursor, on entries crafted in memory -------------------------------------------------------------


def piece(at: int, end: int, index: int = 0) -> Entry:
    return ("0-1", {"index": str(index).encode(), "total": b"1", "pcm": samples(at, end), "at": str(at).encode()})


def test_the_cursor_passes_on_only_what_continues_what_it_passed_on() -> None:
    cursor = AudioCursor()
    assert cursor.take([piece(0, 100), piece(100, 200)]) == [samples(0, 100), samples(100, 200)]
    assert cursor.take([piece(300, 400)]) == [], "a piece past what was passed on would leave a hole"
    assert cursor.missed and cursor.delivered == 200
    assert cursor.take([piece(150, 250), piece(150, 250)]) == [samples(200, 250)], "heard audio is cut off, once"
    assert cursor.take([piece(0, 400)]) == [samples(250, 400)], "a re-run attempt's piece continues it"
    assert cursor.take([("0-2", {"end": b"done"}), piece(400, 500)]) == [] and cursor.ended


def test_the_cursor_places_pieces_without_a_sample_offset_by_their_chunk() -> None:
    cursor = AudioCursor()
    legacy: list[Entry] = [("0-1", {"index": str(i).encode(), "total": b"3", "pcm": bytes([i + 1]) * 4}) for i in range(3)]
    assert cursor.take([legacy[0], legacy[2]]) == [b"\1" * 4], "chunk 2 without chunk 1 would leave a hole"
    assert cursor.missed
    assert cursor.take(legacy) == [b"\2" * 4, b"\3" * 4]


# ---- the reader, on crafted stream entries in a real Redis ----------------------------------------------------------


async def test_a_missed_piece_is_never_passed_on_and_the_hole_is_filled_from_the_stored_pcm(
    make_queue: Any, clock: FakeClock
) -> None:
    """Pieces 0-1000 and 2000-3000 reach the stream, 1000-2000 never did (its worker lost Redis): the reader holds the
    piece past its offset back, and once the job is done continues from the stored result at sample 1000."""
    queue: JobQueue = make_queue()
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(format="pcm"), single_flight=False)
    token = (await claimed(queue)).token
    async with listening(queue) as listener:
        reader = Reader(queue, listener, job_id)
        assert await streams.publish(job_id, token, 0, 1, samples(0, 1000), at=0, partial=True)
        await reader.has(2000)
        assert await streams.publish(job_id, token, 0, 1, samples(2000, 3000), at=2000)
        await complete(queue, job_id, AUDIO, "pcm")
        await reader.ended()
    assert reader.error is None and bytes(reader.received) == AUDIO


async def test_a_hole_is_filled_from_a_re_run_attempts_pieces_before_the_job_ends(make_queue: Any, clock: FakeClock) -> None:
    """The first attempt's stream misses 1000-2000 and its claim goes stale; the re-run attempt republishes from its
    first piece (an attempt is deterministic), and the reader continues from it at its own offset: all of the audio,
    from pieces alone (the stored mp3 could not have filled the hole exactly), before the job ends."""
    queue: JobQueue = make_queue(lease_s=10)
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(format="mp3"), single_flight=False)
    first = (await claimed(queue, "first")).token
    async with listening(queue) as listener:
        reader = Reader(queue, listener, job_id)
        assert await streams.publish(job_id, first, 0, 1, samples(0, 1000), at=0, partial=True)
        assert await streams.publish(job_id, first, 0, 1, samples(2000, 2500), at=2000, partial=True)
        await reader.has(2000)
        retry = await lapse_and_claim_again(queue, clock)
        assert await streams.publish(job_id, retry, 0, 1, samples(0, 1500), at=0, partial=True, fresh=True)
        assert await streams.publish(job_id, retry, 0, 1, samples(1500, 3000), at=1500)
        await reader.has(len(AUDIO))
        await complete(queue, job_id, b"ID3 not an mp3 a reader needs", "mp3")
        await reader.ended()
    assert reader.error is None and bytes(reader.received) == AUDIO


async def test_a_reader_whose_attempt_went_stale_continues_from_the_stored_wav_of_a_re_run_served_from_the_cache(
    make_queue: Any, clock: FakeClock
) -> None:
    """The first attempt streamed 0-1200, then its claim went stale; the re-run was answered from the result cache, so no
    piece follows: the reader continues from the stored WAV at sample 1200, exactly."""
    queue: JobQueue = make_queue(lease_s=10)
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(format="wav"), single_flight=False)
    first = (await claimed(queue, "first")).token
    async with listening(queue) as listener:
        reader = Reader(queue, listener, job_id)
        assert await streams.publish(job_id, first, 0, 1, samples(0, 1200), at=0, partial=True)
        await reader.has(2400)
        await lapse_and_claim_again(queue, clock)
        floats = np.frombuffer(AUDIO, dtype="<i2").astype(np.float32) / 32768
        await complete(queue, job_id, encode_audio(floats, "wav"), "wav")
        await reader.ended()
    assert reader.error is None and bytes(reader.received) == AUDIO


async def test_a_hole_a_lossy_stored_format_cannot_fill_ends_the_stream_with_an_error_after_the_audio_before_it(
    make_queue: Any, clock: FakeClock
) -> None:
    queue: JobQueue = make_queue()
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(format="mp3"), single_flight=False)
    token = (await claimed(queue)).token
    assert await streams.publish(job_id, token, 0, 1, samples(0, 1000), at=0, partial=True)
    assert await streams.publish(job_id, token, 0, 1, samples(2000, 3000), at=2000)
    await complete(queue, job_id, encode_audio(np.zeros(3000, dtype=np.float32), "mp3"), "mp3")
    async with listening(queue) as listener:  # a reader of the finished job: one read of its stream
        reader = Reader(queue, listener, job_id)
        await reader.ended()
    assert bytes(reader.received) == samples(0, 1000), "the audio before the hole, and nothing after it"
    assert isinstance(reader.error, StreamGap) and "mp3" in str(reader.error) and "/v1/tts/result/" in str(reader.error)


async def test_a_finished_job_whose_stream_was_whole_is_not_read_again(make_queue: Any, redis: Redis) -> None:
    """The stored result is read only for what the stream did not give: a whole stream costs no result read."""
    queue: JobQueue = make_queue()
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(format="mp3"), single_flight=False)
    token = (await claimed(queue)).token
    assert await streams.publish(job_id, token, 0, 1, AUDIO, at=0)
    await complete(queue, job_id, b"not an mp3: never decoded", "mp3")
    async with listening(queue) as listener:
        reader = Reader(queue, listener, job_id)
        await reader.ended()
    assert reader.error is None and bytes(reader.received) == AUDIO


async def test_a_raw_audio_body_that_cannot_be_delivered_whole_is_cut_off_not_ended_as_if_whole(
    redis: Redis, make_settings: Any
) -> None:
    """``/v1/tts/stream``: the status code went out with the first audio, so a stream that cannot go on without a hole
    ends without its body's last chunk (an error to every HTTP client): the app never sends the body's end."""
    async with api_client(make_settings()) as (client, app):
        task = await queued_task(client, format="mp3")
        queue = JobQueue(redis, queue_config())
        streams = streams_of(queue)
        token = (await claimed(queue)).token
        assert await streams.publish(task, token, 0, 1, samples(0, 1000), at=0, partial=True)
        assert await streams.publish(task, token, 0, 1, samples(2000, 3000), at=2000)
        await complete(queue, task, encode_audio(np.zeros(3000, dtype=np.float32), "mp3"), "mp3")
        sent = await asgi_get(app, f"/v1/tts/stream/{task}", b"format=pcm")
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [message for message in sent if message["type"] == "http.response.body"]
    assert b"".join(message.get("body", b"") for message in bodies) == samples(0, 1000), "the audio before the hole, no more"
    assert all(message.get("more_body") for message in bodies), "the body is never ended as if it were whole"


async def asgi_get(app: Any, path: str, query: bytes) -> list[dict[str, Any]]:
    """What the app sends for one GET, read at the ASGI level (an in-process HTTP client turns an unfinished body into
    an error of its own, hiding what was sent)."""
    sent: list[dict[str, Any]] = []
    requested = False
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": [(b"host", b"ttsq.test")],
        "client": ("127.0.0.1", 40000),
        "server": ("ttsq.test", 80),
    }

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays: only the app ends the exchange
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


# ---- the listener's own reads through an outage --------------------------------------------------------------------


class OutageClock:
    """The listener's pause and clock: each pause moves the clock on by its length, at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_a_followers_read_rides_an_outage_shorter_than_listen_outage_s_and_ends_past_it(redis: Redis) -> None:
    clock = OutageClock()
    queue = JobQueue(redis, queue_config())
    config = ListenerConfig(block_s=0.5, retry_s=0.5, outage_s=3.0)
    listener = JobListener(redis, queue.shards, config, sleep=clock.sleep, monotonic=clock.monotonic)
    away = create_redis(settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_retries=0).redis_config())
    failures = 0

    async def back_after_two_seconds() -> bytes | str | None:
        """A read that meets a refused connection (a real one: nothing listens on the port) until 2 s have passed."""
        nonlocal failures
        if clock.now < 2.0:
            failures += 1
            return await away.get("x")
        return await redis.get("nothing here")

    try:
        assert await listener.read(back_after_two_seconds) is None
        assert failures == 4 and clock.now == 2.0, "tried again every LISTEN_RETRY_S until Redis answered"
        with pytest.raises(ListenerOutage, match="unreachable too long"):
            await listener.read(lambda: away.get("x"))
        assert clock.now == 2.0 + 3.0, "given up once Redis had been away LISTEN_OUTAGE_S"
    finally:
        await away.aclose()


# ---- the worker's side: pieces Redis cannot take for a while are kept, and land in order ---------------------------


def _stream_append_sha() -> bytes:
    return hashlib.sha1(files("ttsq.store").joinpath("lua", "stream_append.lua").read_bytes()).hexdigest().encode()


async def test_pieces_redis_refuses_for_a_while_all_land_in_order_under_the_jobs_claim(
    redis_server: RedisServer, redis: Redis, tiny_engine: ChatTTSEngine
) -> None:
    """Every publication of a piece is answered ``LOADING`` (a Redis restarting, loading its append-only file) for a
    while, past redis-py's own retries: the worker keeps each piece and tries again, and once Redis takes them the
    job's stream holds every piece, in order, contiguous from sample 0 to its end: its stored audio exactly."""
    job_id = task_id()
    async with proxied(redis_server) as (proxy, client), running_worker(client, tiny_engine) as worker:
        retries = settings().redis_retries
        proxy.answer(_stream_append_sha(), b"-LOADING Redis is loading the dataset in memory\r\n")
        await worker.queue.enqueue(job_id, params(LONG_TEXT, format="pcm"), single_flight=False)

        async def refused_for_a_while() -> None:
            """Until two pieces' publications have each been refused past redis-py's retries (or the job has ended)."""
            while len(proxy.answered) < 2 * (retries + 1):
                job = await worker.queue.get(job_id)
                if job is not None and job.status.is_final:
                    return
                await asyncio.sleep(0.02)

        await asyncio.wait_for(refused_for_a_while(), GUARD_S * 2)
        proxy.stop_answering(_stream_append_sha())
        job = await wait_final(worker.queue, job_id)
        stored = await worker.queue.result(job_id)
        entries: Any = await redis.xrange(worker.queue.keys.stream(job_id))
    assert job.status is Status.DONE and stored is not None
    pieces = [(int(fields[b"at"]), fields[b"pcm"]) for _, fields in entries if b"pcm" in fields]
    places = [at for at, _ in pieces]
    ends = [at + len(pcm) // 2 for at, pcm in pieces]
    assert places == [0, *ends[:-1]], "each piece starts where the one before it ended: none missing, none out of order"
    assert b"".join(pcm for _, pcm in pieces) == stored


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac"])
def test_only_the_formats_a_reader_continues_from_store_exactly_the_streamed_samples(fmt: str) -> None:
    """What :data:`ttsq.store.streams.EXACT_FORMATS` promises: the stored file of these formats decodes to the very PCM16
    the pieces carried (the worker writes both from the same float samples); FLAC, lossless but converted otherwise,
    does not, and is not among them."""
    rng = np.random.default_rng(3)
    floats = np.clip(rng.normal(0, 0.4, 24000), -1.2, 1.2).astype(np.float32)
    stored = encode_audio(floats, fmt)  # type: ignore[arg-type]
    streamed = b"".join(encode_audio(floats[i : i + 1000], "pcm") for i in range(0, floats.size, 1000))
    exact = (stored if fmt == "pcm" else decode_to_pcm16(stored)) == streamed
    assert exact is (fmt in EXACT_FORMATS)
