"""Playback-aware streaming in the worker: its listeners' underruns and slack, and ``STREAM_ADMISSION=wait`` keeping new
streams in the queue past what a decode step keeps real-time. Real tiny ChatTTS on ttsq's decoder, real Redis."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from settings import Settings
from tests.conftest import task_id
from tests.integration.runtime.test_worker import _true, params, running_worker, wait_final, wait_until
from tests.integration.runtime.test_worker_decoder import StepLog
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.domain.jobs import Status
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.runtime.worker import Worker

THREE_CHUNKS = "The first sentence is here. Then a second one comes. And the third ends it."
"""Three chunks at the test engine's 40 characters a chunk: a stream of at least three pieces."""


def sample(worker: Worker, name: str) -> float:
    value = worker.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


async def test_a_piece_after_the_listeners_audio_ran_out_is_an_underrun(redis: Redis, tiny_decoder_engine: DecoderEngine) -> None:
    async with running_worker(redis, tiny_decoder_engine) as worker:
        # A playback clock on which a minute passes between any two looks: each piece after the first comes too late.
        worker.clock = itertools.count(0, 60).__next__
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(THREE_CHUNKS, listened=True), single_flight=False)
        assert (await wait_final(worker.queue, job_id)).status == Status.DONE
        # Every delivery after the first has a slack; each of them ran dry.
        assert sample(worker, "ttsq_stream_slack_seconds_count") >= 2
        assert sample(worker, "ttsq_stream_underruns_total") == sample(worker, "ttsq_stream_slack_seconds_count")


async def test_pieces_while_the_listener_still_has_audio_are_no_underrun(redis: Redis, tiny_decoder_engine: DecoderEngine) -> None:
    async with running_worker(redis, tiny_decoder_engine) as worker:
        worker.clock = lambda: 100.0  # no time passes: every piece finds a second of audio still buffered
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(THREE_CHUNKS, listened=True), single_flight=False)
        assert (await wait_final(worker.queue, job_id)).status == Status.DONE
        assert sample(worker, "ttsq_stream_underruns_total") == 0
        assert sample(worker, "ttsq_stream_slack_seconds_count") >= 2
        assert sample(worker, "ttsq_stream_capacity_rows") >= 0  # measured from the steps, no longer -1


async def _most_together(redis: Redis, engine: DecoderEngine, admission: str, rtf_target: float = 0.8) -> int:
    """Three three-chunk jobs queued at once: the most of them whose rows shared one decode step."""
    spy = StepLog(engine)
    async with running_worker(
        redis, spy, max_batch=8, batch_wait_ms=200, stream_admission=admission, stream_rtf_target=rtf_target
    ) as worker:
        ids = [task_id() for _ in range(3)]
        for n, job_id in enumerate(ids):
            await worker.queue.enqueue(job_id, params(f"Stream {n}. " + THREE_CHUNKS, seed=20 + n), single_flight=False)
        for job_id in ids:
            assert (await wait_final(worker.queue, job_id)).status == Status.DONE
        # The room it reports in its heartbeat (the API's STREAM_ADMISSION=refuse): idle, one at least; none when off.
        assert worker.record.stream_room == (None if admission == "off" else 1)
    return max(len(step) for step in spy.steps)


async def test_beyond_the_real_time_rows_new_streams_wait_in_the_queue(redis: Redis, tiny_decoder_engine: DecoderEngine) -> None:
    # A target no step can meet: no row is real-time, so one job at a time (an idle worker always takes one) and the
    # others wait in the queue until its rows have left the engine.
    assert await _most_together(redis, tiny_decoder_engine, "wait", rtf_target=1e-6) == 1
    # Without admission the three share steps.
    assert await _most_together(redis, tiny_decoder_engine, "off") == 3


async def test_stream_admission_keeps_to_the_bound_a_rows_start_sets_where_it_is_tighter(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    # The tiny decoder's 9-token field with the default pieces (32 after 40, streamed runs of 64): its exact audio
    # reaches 63.5 tokens at step 72 (the first of token 63's two mel frames is complete), then nothing more until
    # step 136, so a listener that started at step 40 keeps audio throughout while a step plays at most
    # 63.5 / (136 - 40) of a token.
    async with running_worker(redis, tiny_decoder_engine, stream_admission="wait", stream_rtf_target=0.8) as worker:
        assert worker.stream_target == 63.5 / 96
    async with running_worker(redis, tiny_decoder_engine, stream_admission="wait", stream_rtf_target=0.5) as worker:
        assert worker.stream_target == 0.5  # the setting, where it is the tighter


async def test_a_job_nobody_listens_to_counts_no_underrun(redis: Redis, tiny_decoder_engine: DecoderEngine) -> None:
    """The listener metrics are about people hearing a stream: a job submitted without ``listen`` has none, however
    late its chunks come."""
    async with running_worker(redis, tiny_decoder_engine) as worker:
        worker.clock = itertools.count(0, 60).__next__
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(THREE_CHUNKS), single_flight=False)
        assert (await wait_final(worker.queue, job_id)).status == Status.DONE
        assert worker.metrics.registry.get_sample_value("ttsq_stream_slack_seconds_count") in (None, 0)
        assert worker.metrics.registry.get_sample_value("ttsq_stream_underruns_total") in (None, 0)


@pytest.fixture(scope="module")
def long_chunk_engine(tiny_checkpoint_dir: Path) -> Iterator[DecoderEngine]:
    """The default engine with 300-token chunks: a stream plays for seconds of decode steps after its first piece."""
    defaults = Settings(_env_file=None)
    engine = DecoderEngine(
        dataclasses.replace(TINY_ENGINE_CONFIG, max_new_token=300, min_new_token=300),
        cuda_graphs=False,
        batch_invariant=defaults.batch_invariant,
        first_chunk_slots=defaults.first_chunk_slots,
        overlap=defaults.overlap_prefill_and_audio,
        playback_margin_s=defaults.playback_margin_s,
        pieces=(defaults.piece_tokens, defaults.piece_lookahead),
    )
    engine.load()
    yield engine
    engine.release_memory()


async def _shared_a_step_with_a_starved_stream(redis: Redis, engine: DecoderEngine, slack: bool) -> bool:
    """One job started; once its listener plays, on a playback clock on which a minute passes between any two looks
    (so it is always short of its margin), a second job is queued: whether their rows ever shared a decode step."""
    spy = StepLog(engine)
    async with running_worker(redis, spy, max_batch=8, stream_admission="wait", stream_admission_slack=slack) as worker:
        worker.clock = itertools.count(0, 60).__next__
        first, second = task_id(), task_id()
        await worker.queue.enqueue(first, params("A starved stream speaks on and on.", seed=31, listened=True), single_flight=False)
        await wait_until(lambda: _true(first in worker._in_flight and worker._in_flight[first].listener.started_at is not None))
        await worker.queue.enqueue(second, params("Another stream waits its turn.", seed=32, listened=True), single_flight=False)
        for job_id in (first, second):
            assert (await wait_final(worker.queue, job_id)).status == Status.DONE
    return any(len(step) > 1 for step in spy.steps)


async def test_while_a_started_stream_is_short_of_its_margin_wait_claims_nothing_more(
    redis: Redis, long_chunk_engine: DecoderEngine
) -> None:
    assert not await _shared_a_step_with_a_starved_stream(redis, long_chunk_engine, slack=True)
    # On the fitted cost alone (one row in hand, well within what a step keeps real-time) the second one joins at once.
    assert await _shared_a_step_with_a_starved_stream(redis, long_chunk_engine, slack=False)
