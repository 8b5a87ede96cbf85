"""A stream's chunks across jobs in the worker: its listener's underruns and slack count the gap between two jobs of one
stream, and a continuation is no new stream to ``STREAM_ADMISSION``. Real tiny ChatTTS on ttsq's decoder, real Redis;
the worker's playback clock is the test's."""

from __future__ import annotations

from redis.asyncio import Redis

from tests.conftest import task_id
from tests.integration.runtime.test_stream_admission import sample
from tests.integration.runtime.test_worker import params, running_worker, wait_final, wait_until
from tests.integration.runtime.test_worker_decoder import StepLog
from ttsq.domain.jobs import Status, StreamPlace
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue

ONE_CHUNK = "One short sentence."


async def spoken(queue: JobQueue, text: str, stream: StreamPlace | None = None, seed: int = 11) -> str:
    job_id = task_id()
    await queue.enqueue(job_id, params(text, seed=seed, stream=stream, listened=True), single_flight=False)
    return job_id


async def test_a_gap_between_two_chunks_of_a_stream_is_an_underrun_of_its_one_listener(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    async with running_worker(redis, tiny_decoder_engine) as worker:
        now = [100.0]
        worker.clock = lambda: now[0]
        first = await spoken(worker.queue, ONE_CHUNK, StreamPlace(id="s:c", chunk=0))
        assert (await wait_final(worker.queue, first)).status == Status.DONE
        assert sample(worker, "ttsq_stream_underruns_total") == 0, "no time passed within the first chunk"
        now[0] = 130.0  # its listener ran dry a while ago (its second of audio ran out at about 101)
        second = await spoken(worker.queue, ONE_CHUNK, StreamPlace(id="s:c", chunk=1, buffered_s=0.5), seed=12)
        assert (await wait_final(worker.queue, second)).status == Status.DONE
        assert sample(worker, "ttsq_stream_underruns_total") == 1, "the second chunk's first audio came after a gap"
        # A stream whose earlier chunks this worker never heard counts no slack at its first audio here: the API's count
        # is a floor (its earlier chunk was still streaming when this one was queued), not what the listener heard.
        elsewhere = await spoken(worker.queue, ONE_CHUNK, StreamPlace(id="t:c", chunk=3, buffered_s=-50.0), seed=13)
        assert (await wait_final(worker.queue, elsewhere)).status == Status.DONE
        assert sample(worker, "ttsq_stream_underruns_total") == 1


async def test_stream_admission_holds_new_streams_back_but_not_a_continuation(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    """A step target no step meets: the worker's stream room is nothing while it has a job in hand. A new stream queued
    meanwhile waits for the worker to be empty; a continuation of a stream already playing is claimed at once.

    Read from the decode steps themselves (which requests ran together), not from a look at the worker while the long
    stream plays: a look comes a poll late, and the long stream may have ended by then."""
    spy = StepLog(tiny_decoder_engine)
    long_text = " ".join(f"Sentence number {n} is here." for n in range(48))
    new_text = "A new stream begins here."
    async with running_worker(redis, spy, max_batch=4, stream_admission="wait", stream_rtf_target=1e-9) as worker:
        queue = worker.queue
        playing = await spoken(queue, long_text, StreamPlace(id="a:c", chunk=0))

        async def running() -> bool:
            job = await queue.get(playing)
            return job is not None and job.status != Status.QUEUED

        await wait_until(running, 60)
        new = await spoken(queue, new_text, StreamPlace(id="b:c", chunk=0), seed=12)
        going_on = await spoken(queue, ONE_CHUNK, StreamPlace(id="c:c", chunk=1, buffered_s=1.0), seed=13)
        for job_id in (going_on, playing, new):
            assert (await wait_final(queue, job_id)).status == Status.DONE

    def with_the_long_stream(text: str) -> bool:
        return any(text in step and any(other.startswith("Sentence number") for other in step) for step in spy.steps)

    assert any(new_text in step for step in spy.steps) and any(ONE_CHUNK in step for step in spy.steps)
    assert with_the_long_stream(ONE_CHUNK), "the continuation was claimed while the worker had no stream room"
    assert not with_the_long_stream(new_text), "the new stream waited for an empty worker"
