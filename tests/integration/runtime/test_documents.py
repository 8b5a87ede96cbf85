"""A whole document on real workers (:mod:`ttsq.runtime.documents`, ttsq's decoder on the tiny checkpoint, batch-
invariant, a real redis-server): an attempt that fails halfway leaves the parts it published whole in the document's
stream, and the next attempt — on another worker — synthesises only the rest, so the document's audio and captions
are exactly those of one attempt that never failed."""

from __future__ import annotations

import asyncio

import numpy as np
from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.integration.runtime.test_worker import running_worker, wait_final, wait_until
from ttsq.domain.jobs import Status, TTSParams
from ttsq.domain.segments import Segment
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.faults import FaultInjectingEngine
from ttsq.store.streams import AudioCursor, AudioStreams

FAILING_PART = 3


def document(marker: str) -> TTSParams:
    """Six parts, the fourth holding ``marker`` (a fault injected there fails the attempt that speaks it)."""
    texts = [f"Paragraph {n} of the document is read here." for n in range(6)]
    texts[FAILING_PART] = f"This paragraph says {marker} once."
    segments = [Segment(text=text, speaker_seed=4, pause_samples=None if n == 0 else 9_600) for n, text in enumerate(texts)]
    return TTSParams(text="\n".join(texts), segments=segments, seed=8, format="pcm", document=True)


async def stream_audio(streams: AudioStreams, job_id: str) -> bytes:
    """The document's audio as a listener reads it from its stream (repeats skipped, no hole)."""
    cursor, pcm, after = AudioCursor(), [], None
    while page := await streams.entries(job_id, after, 7):  # small pages: the paging is read too
        after = page[-1][0]
        pcm.extend(cursor.take(page))
    assert not cursor.missed and cursor.ended
    return b"".join(pcm)


async def test_a_document_goes_on_after_the_parts_a_failed_attempt_published(redis: Redis, invariant_engine: DecoderEngine) -> None:
    reference_id, job_id = task_id(), task_id()
    queue = queue_config(block_s=0.2, retry_base_s=2.0)
    async with running_worker(redis, invariant_engine, queue, document_parts_in_flight=1) as worker:
        await worker.queue.enqueue(reference_id, document("BOOM"), single_flight=False)
        reference = await wait_final(worker.queue, reference_id)
        assert reference.status is Status.DONE, reference.error
        chunks_at_once = worker.metrics.chunks._value.get()
        assert await worker.queue.result(reference_id) == b"", "a document's audio is its stream's"

    failing = FaultInjectingEngine(invariant_engine, fault_config("raise", "BOOM"))
    async with running_worker(redis, failing, queue, document_parts_in_flight=1) as worker:
        await worker.queue.enqueue(job_id, document("BOOM"), single_flight=False)

        async def failed_once() -> bool:
            job = await worker.queue.get(job_id)
            return job is not None and job.attempts == 1 and job.status is Status.QUEUED

        await wait_until(failed_once)
        published = await worker.streams.document_progress(job_id)
        assert published is not None and published[0] == FAILING_PART, published

    async with running_worker(redis, invariant_engine, queue, document_parts_in_flight=1) as worker:
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.DONE and job.attempts == 2, job.error
        assert worker.metrics.document_parts_kept._value.get() == FAILING_PART
        resumed_chunks = worker.metrics.chunks._value.get()
        reference_audio, audio = await stream_audio(worker.streams, reference_id), await stream_audio(worker.streams, job_id)
    assert resumed_chunks < chunks_at_once, "the parts published whole were not synthesised again"
    assert len(audio) > 0 and audio == reference_audio, "the resumed document is the document spoken at once"
    assert job.duration_s == reference.duration_s and round((job.duration_s or 0) * 24_000) == len(audio) // 2
    assert [(cue.start, cue.end, cue.text) for cue in job.captions or []] == [
        (cue.start, cue.end, cue.text) for cue in reference.captions or []
    ]
    samples = np.frombuffer(audio, dtype="<i2")
    cues = job.captions or []
    assert cues[0].start == 0 and cues[-1].end == samples.size


async def test_a_document_cancelled_while_it_runs_leaves_no_part_in_the_engine(
    redis: Redis, invariant_engine: DecoderEngine
) -> None:
    async with running_worker(redis, invariant_engine, document_parts_in_flight=2) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, document("nothing"), single_flight=False)
        await wait_until(lambda: asyncio.sleep(0, job_id in worker._in_flight))
        job = await worker.queue.get(job_id)
        assert job is not None
        await worker.queue.cancel(job, None)
        final = await wait_final(worker.queue, job_id)
        assert final.status is Status.CANCELLED
        assert worker._batcher is not None
        left = await asyncio.wrap_future(worker._thread.call(worker._batcher.requests))
        assert [key for key in left if key.startswith(job_id)] == []
