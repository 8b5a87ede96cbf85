"""Audio within a chunk, as it is generated: the scheduler hands each code row's states to its piece
decoder every few steps and sends the audio that is ready as :class:`PieceReady` events before the chunk ends.
Real tiny ChatTTS: its GPT, decoder and Vocos."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from settings import Settings
from tests.conftest import FakeClock, claimed, listening, task_id
from tests.integration.runtime.test_streaming import collect, streams_of
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from tests.support.conftest_engine import TINY_ENGINE_CONFIG, pieced_engine
from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16, join_chunks
from ttsq.domain.jobs import Status
from ttsq.inference.audio.handoff import Cadence, keep_ahead
from ttsq.inference.audio.streaming import RUN_TOKENS
from ttsq.inference.base import ChunkAudio, ChunkReady, OutOfMemory, PieceReady, SynthesisRequest
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.sched.background import RankedExecutor
from ttsq.inference.sched.scheduler import Scheduler
from ttsq.runtime.assembly import JobAudio
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed
from ttsq.store.streams import pcm_pieces

FORCED = 300
"""Every chunk is exactly this many tokens long (min = max new tokens): a long sentence's chunk."""
DEFAULTS = Settings(_env_file=None)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint_dir: Any) -> Iterator[DecoderEngine]:
    yield pieced_engine(dataclasses.replace(TINY_ENGINE_CONFIG, max_new_token=FORCED, min_new_token=FORCED))


def scheduler(engine: DecoderEngine, *, pieces: bool = True, overlap: bool = False, slots: int = 2) -> Scheduler:
    pools = (RankedExecutor("test-prefill"), RankedExecutor("test-audio")) if overlap else None
    made = engine._scheduler(slots, engine._limits(), oom_recover_s=60, capture=False, pieces=engine._piecing() if pieces else None)
    made._prefill_pool, made.audio.pool = pools if pools is not None else (None, None)
    return made


def request(engine: DecoderEngine, seed: int = 3, text: str = "One long sentence, spoken slowly.") -> SynthesisRequest:
    return SynthesisRequest(text=text, speaker=engine.speaker_from_seed(seed), seed=seed)


@dataclasses.dataclass
class Heard:
    pieces: dict[str, list[np.ndarray]] = dataclasses.field(default_factory=dict)
    chunks: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    first_piece_step: dict[str, int] = dataclasses.field(default_factory=dict)
    failed: dict[str, BaseException] = dataclasses.field(default_factory=dict)


def drain(made: Scheduler, heard: Heard | None = None) -> Heard:
    heard = heard or Heard()
    while made.busy:
        for event in made.step():
            if isinstance(event, PieceReady):
                assert event.chunk.index == 0 and event.key not in heard.chunks, "a piece after its chunk's end"
                heard.pieces.setdefault(event.key, []).append(event.chunk.samples)
                heard.first_piece_step.setdefault(event.key, made.stats.steps)
            elif isinstance(event, ChunkReady):
                heard.chunks[event.key] = event.chunk.samples
            else:
                heard.failed[event.key] = event.error
    return heard


def test_a_300_token_chunk_is_heard_after_at_most_40_decode_steps_and_its_pieces_are_its_audio(
    engine: DecoderEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """Default settings: the first piece after ``PIECE_TOKENS + PIECE_LOOKAHEAD`` (≤ 40) steps, logged with its step
    count; the chunk is its pieces joined, bit for bit, and at the default look-ahead the whole decode's samples
    within float rounding."""
    assert DEFAULTS.piece_tokens + DEFAULTS.piece_lookahead <= 40
    made = scheduler(engine)
    made.add("long", request(engine))
    with caplog.at_level(logging.INFO, logger="ttsq.inference.sched.scheduler"):
        heard = drain(made)
    assert heard.first_piece_step["long"] <= 40
    logged = [int(m.group(1)) for r in caplog.records if (m := re.search(r"first audio after (\d+) decode steps", r.getMessage()))]
    assert logged and logged[0] <= 40
    pieces, chunk = heard.pieces["long"], heard.chunks["long"]
    # The lead, then a piece each time the streamed decode runs its layers (every RUN_TOKENS states).
    assert len(pieces) >= 1 + (FORCED - DEFAULTS.piece_tokens) // RUN_TOKENS - 1
    joined = np.concatenate(pieces)
    assert joined.size < chunk.size and np.array_equal(chunk[: joined.size], joined)
    whole = scheduler(engine, pieces=False)
    whole.add("long", request(engine))
    decoded = drain(whole)
    assert "long" not in decoded.pieces
    assert chunk.size == decoded.chunks["long"].size
    assert np.abs(chunk - decoded.chunks["long"]).max() < 1e-5


def test_pieces_decoded_in_the_audio_thread_are_the_same_audio_in_the_same_order(engine: DecoderEngine) -> None:
    inline = scheduler(engine)
    inline.add("a", request(engine, 4))
    expected = drain(inline)
    beside = scheduler(engine, overlap=True)
    beside.add("a", request(engine, 4))
    heard = drain(beside)
    assert np.array_equal(np.concatenate(heard.pieces["a"]), np.concatenate(expected.pieces["a"]))
    assert np.array_equal(heard.chunks["a"], expected.chunks["a"])


@pytest.mark.parametrize("overlap", [False, True])
def test_a_request_nobody_listens_to_is_decoded_whole_at_its_end_beside_one_heard_in_pieces(
    engine: DecoderEngine, overlap: bool
) -> None:
    """A request without ``pieces`` (a job with no live listener), in a scheduler that pieces: its rows get no piece
    decoder and it sends no :class:`PieceReady`; its chunk is, bit for bit, what a scheduler without pieces makes of the
    same requests. A request beside it that wants pieces still gets them, and its chunk is its pieces joined."""
    made = scheduler(engine, overlap=overlap)
    made.add("quiet", dataclasses.replace(request(engine, 4), pieces=False))
    made.add("heard", request(engine, 5))
    decoders: dict[str, bool] = {}  # whether a request's row ever had a piece decoder, looked at before every step

    def look(_reqs: Any) -> None:
        for row in made._active.values():
            decoders[row.request.key] = decoders.get(row.request.key, False) or row.audio is not None

    made.hook = look
    heard = drain(made)
    assert decoders == {"quiet": False, "heard": True}
    assert "quiet" not in heard.pieces and heard.pieces["heard"]
    joined = np.concatenate(heard.pieces["heard"])
    assert np.array_equal(heard.chunks["heard"][: joined.size], joined)
    whole = scheduler(engine, pieces=False, overlap=overlap)
    whole.add("quiet", request(engine, 4))
    whole.add("heard", request(engine, 5))
    expected = drain(whole)
    assert np.array_equal(heard.chunks["quiet"], expected.chunks["quiet"]), "the whole decode, bit for bit"
    assert heard.chunks["heard"].size == expected.chunks["heard"].size
    assert np.abs(heard.chunks["heard"] - expected.chunks["heard"]).max() < 1e-5


def test_a_row_run_again_after_running_out_of_memory_sends_none_of_its_audio_twice(engine: DecoderEngine) -> None:
    """Out of memory mid-chunk: the most recently admitted row goes back to the queue and runs again from its prompt;
    the pieces it already sent are not sent again, and its chunk is still exactly the pieces it sent joined."""
    clean = scheduler(engine)
    clean.add("first", request(engine, 5))
    clean.add("second", request(engine, 6))
    expected = drain(clean)
    made = scheduler(engine, overlap=True)
    made.add("first", request(engine, 5))
    made.add("second", request(engine, 6))
    raised = False

    def oom_once(_reqs: Any) -> None:
        nonlocal raised
        if made.stats.steps == 120 and not raised:
            raised = True
            raise OutOfMemory("test: out of memory mid-chunk")

    made.hook = oom_once
    heard = drain(made)
    assert raised and made.stats.out_of_memory == 1 and not heard.failed
    for key in ("first", "second"):
        joined = np.concatenate(heard.pieces[key])
        assert np.array_equal(heard.chunks[key][: joined.size], joined)
        assert heard.chunks[key].size == expected.chunks[key].size
        assert np.abs(heard.chunks[key] - expected.chunks[key]).max() < 1e-5


def test_a_request_cancelled_mid_chunk_leaves_no_piece_state_behind(engine: DecoderEngine) -> None:
    """Its pieces waiting for the audio thread are cancelled (never decoded) and forgotten; nothing of it comes after."""
    made = scheduler(engine, overlap=True)
    gate = threading.Event()
    assert made.audio.pool is not None
    made.audio.pool.submit((-1,), gate.wait)  # holds the audio thread: the pieces asked for meanwhile wait
    made.add("gone", request(engine, 7))
    made.add("kept", request(engine, 8))
    for _ in range(80):
        made.step()
    waiting = [entry.future for entry in made.audio.pending if entry.row.request.key == "gone"]
    assert waiting, "no piece of the cancelled request was waiting"
    made.cancel("gone")
    gate.set()
    assert all(future.cancelled() for future in waiting)
    assert all(entry.row.request.key != "gone" for entry in made.audio.pending)
    heard = drain(made)
    assert "gone" not in heard.pieces and "gone" not in heard.chunks and "kept" in heard.chunks
    assert not made.busy and made.requests() == [] and made.audio.pending == []


def test_failures_mid_chunk_end_the_request_with_one_failure_and_nothing_after(engine: DecoderEngine) -> None:
    made = scheduler(engine)
    made.add("poisoned", request(engine, 9))

    def fail_late(_reqs: Any) -> None:
        if made.stats.steps == 100:
            raise RuntimeError("test: the step failed")

    made.hook = fail_late
    heard = drain(made)
    assert isinstance(heard.failed.get("poisoned"), Exception) and "poisoned" not in heard.chunks
    assert heard.pieces["poisoned"], "pieces came before the failure"
    assert not made.busy and made.audio.pending == []


# ---- the job's audio: pieces released in order, exactly the joined chunks --------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=4),
    cuts=st.lists(st.integers(1, 900), min_size=1, max_size=12),
    order=st.randoms(use_true_random=False),
    tail=st.booleans(),
)
def test_released_pieces_are_the_joined_chunks_bit_for_bit_whatever_the_order(
    lengths: list[int], cuts: list[int], order: Any, tail: bool
) -> None:
    """Chunks end in any order and their pieces come interleaved: the releases, concatenated, are exactly
    :func:`join_chunks` of the chunks, each where ``at`` says, and the captions are what whole chunks give."""
    rng = np.random.default_rng(len(lengths))
    chunks = [rng.uniform(-1, 1, size).astype(np.float32) for size in lengths]
    events: list[tuple[str, int, np.ndarray]] = []
    for index, chunk in enumerate(chunks):
        at, turn, mine = 0, 0, []
        while at < chunk.size:
            step = cuts[turn % len(cuts)]
            mine.append(("piece", index, chunk[at : at + step]))
            at, turn = at + step, turn + 1
        events.append(("chunk", index, chunk))
        events[-1:-1] = mine[: len(mine) - 1] if tail else mine  # the last cut comes with the chunk's end, or before it
    # any interleaving that keeps each chunk's own events in order
    queues = {index: [e for e in events if e[1] == index] for index in range(len(chunks))}
    shuffled = []
    while any(queues.values()):
        index = order.choice([i for i, q in queues.items() if q])
        shuffled.append(queues[index].pop(0))
    audio, out, whole = JobAudio(), [], JobAudio()
    for kind, index, samples in shuffled:
        made = ChunkAudio(index, len(chunks), samples, f"chunk {index}")
        out += audio.add_piece(made) if kind == "piece" else audio.add(made)
    for index, chunk in enumerate(chunks):
        whole.add(ChunkAudio(index, len(chunks), chunk, f"chunk {index}"))
    joined = join_chunks(chunks)
    assert np.array_equal(np.concatenate([r.samples for r in out]), joined) and np.array_equal(audio.samples(), joined)
    assert [r.at for r in out] == list(np.cumsum([0] + [r.samples.size for r in out[:-1]]))
    assert [r.index for r in out if r.final] == list(range(len(chunks)))
    assert audio.timings == whole.timings


def test_a_piece_after_its_chunk_ended_or_a_chunk_not_beginning_with_its_pieces_is_refused() -> None:
    audio = JobAudio()
    audio.add_piece(ChunkAudio(0, 1, np.ones(1000, dtype=np.float32)))
    with pytest.raises(ValueError, match="does not begin with its pieces"):
        audio.add(ChunkAudio(0, 1, np.zeros(2000, dtype=np.float32)))
    audio.add(ChunkAudio(0, 1, np.ones(2000, dtype=np.float32)))
    with pytest.raises(ValueError, match="after the chunk ended"):
        audio.add_piece(ChunkAudio(0, 1, np.ones(10, dtype=np.float32)))


# ---- through the worker: real Redis, the job's stream -----------------------------------------------------------------


@pytest.fixture(scope="module")
def serving(tiny_checkpoint_dir: Any) -> Iterator[DecoderEngine]:
    """The serving configuration (audio thread beside the loop, default pieces) with every chunk forced long."""
    config = dataclasses.replace(TINY_ENGINE_CONFIG, max_new_token=FORCED, min_new_token=FORCED, max_chunk_chars=60)
    made = DecoderEngine(
        config,
        cuda_graphs=False,
        batch_invariant=False,
        first_chunk_slots=DEFAULTS.first_chunk_slots,
        overlap=True,
        pieces=(DEFAULTS.piece_tokens, DEFAULTS.piece_lookahead),
    )
    made.load()
    yield made


async def test_a_one_sentence_job_streams_its_chunk_in_pieces_and_stores_exactly_what_it_streamed(
    redis: Redis, serving: DecoderEngine
) -> None:
    async with running_worker(redis, serving) as worker:
        job_id = task_id()
        await worker.queue.enqueue(
            job_id, params("One long sentence, for pieces.", format="wav", listened=True), single_flight=False
        )
        reader = asyncio.create_task(collect(worker.queue, job_id))
        pieces = await asyncio.wait_for(reader, 120)
        job = await wait_final(worker.queue, job_id)
        stored = await worker.queue.result(job_id)
        entries: Any = await redis.xrange(worker.queue.keys.stream(job_id))
        registry = worker.metrics.registry
    assert job.status is Status.DONE and stored is not None and job.captions is not None
    assert registry.get_sample_value("ttsq_time_to_first_audio_seconds_count") == 1, "time to first audio, observed once"
    published = [fields for _, fields in entries if b"pcm" in fields]
    assert len(published) >= 1 + (FORCED - DEFAULTS.piece_tokens) // RUN_TOKENS - 1, "the chunk came in pieces"
    assert [fields[b"partial"] for fields in published] == [b"1"] * (len(published) - 1) + [b"0"]
    assert b"".join(pieces) == decode_to_pcm16(stored), "the stored result is exactly the pieces joined"
    first_piece_ms = next(int(entry_id.split(b"-")[0]) for entry_id, fields in entries if b"pcm" in fields)
    assert job.finished_at is not None and first_piece_ms < job.finished_at * 1000
    cue = published[-1]
    assert (int(cue[b"start"]), int(cue[b"end_at"])) == (job.captions[0].start, job.captions[0].end)
    assert all(int(fields[b"start"]) == -1 for fields in published[:-1]), "captions only at the chunk's end"
    assert await worker.streams.progress(job_id) == (1, 1)


async def test_a_reader_skips_by_place_what_an_earlier_attempt_already_sent(make_queue: Any, clock: FakeClock) -> None:
    """A re-run attempt's pieces need not fall where the first attempt's did: the reader skips by sample."""
    queue: JobQueue = make_queue(lease_s=10)
    streams = streams_of(queue)
    job_id = task_id()
    await queue.enqueue(job_id, params(), single_flight=False)
    audio = bytes(range(40))  # 20 samples
    first = (await claimed(queue, "lost")).token
    assert await streams.publish(job_id, first, 0, 1, audio[:14], at=0, partial=True)
    received: list[bytes] = []
    got_first = asyncio.Event()

    async def read() -> None:
        async with listening(queue) as listener:
            async for piece in pcm_pieces(streams, listener, queue, job_id):
                received.append(piece)
                got_first.set()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(got_first.wait(), 10)
    clock.advance(11)
    assert (await queue.leases.sweep(5.0, "sweeper")).requeued == 1
    retry = (await claimed(queue, "w")).token
    assert await streams.publish(job_id, retry, 0, 1, audio[:10], at=0, partial=True, fresh=True)
    assert await streams.publish(job_id, retry, 0, 1, audio[10:30], at=5, partial=True)
    assert await streams.progress(job_id) == (0, 1), "a chunk still running is not done"
    assert await streams.publish(job_id, retry, 0, 1, audio[30:], at=15, spoken=(0, 20, "x"))
    assert await streams.progress(job_id) == (1, 1)
    job = await queue.get(job_id)
    assert job is not None
    assert await queue.leases.complete(job, b"RIFF", "audio/wav", 20 / SAMPLE_RATE, 0.1, cache_key=None) is Completed.DONE
    await asyncio.wait_for(reader, 10)
    assert b"".join(received) == audio


def test_one_voice_across_the_text_takes_its_speaker_prompt_from_the_first_chunk_decoded_in_pieces(
    engine: DecoderEngine,
) -> None:
    """``consistent``: the first chunk's whole wave, put together from its pieces, is the later chunks' speaker
    prompt, as the whole decode's is: every chunk sounds as without pieces."""
    text = "The first sentence sets the voice. The second one keeps it."
    voiced = dataclasses.replace(request(engine, 12, text), consistent=True)
    heard = {}
    for pieces in (True, False):
        made = scheduler(engine, pieces=pieces, overlap=pieces)
        made.add("voice", voiced)
        chunks: dict[int, np.ndarray] = {}
        while made.busy:
            chunks |= {e.chunk.index: e.chunk.samples for e in made.step() if isinstance(e, ChunkReady)}
        heard[pieces] = chunks
    assert sorted(heard[True]) == sorted(heard[False]) == [0, 1]
    for index in (0, 1):
        assert heard[True][index].size == heard[False][index].size
        assert np.abs(heard[True][index] - heard[False][index]).max() < 1e-5


async def test_a_job_of_several_chunks_streams_each_in_pieces_in_order_with_each_caption_at_its_chunks_end(
    redis: Redis, serving: DecoderEngine
) -> None:
    """Chunks decode side by side, so a later chunk's pieces may come before an earlier chunk ends: the stream
    still carries the chunks in order, each chunk's cue on its last piece, exact to the sample, and the stored result
    is the stream joined."""
    text = "The first sentence is here. And then a second one follows it."
    async with running_worker(redis, serving, max_batch=4) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(text, format="wav", listened=True), single_flight=False)
        reader = asyncio.create_task(collect(worker.queue, job_id))
        pieces = await asyncio.wait_for(reader, 120)
        job = await wait_final(worker.queue, job_id)
        stored = await worker.queue.result(job_id)
        entries: Any = await redis.xrange(worker.queue.keys.stream(job_id))
    assert job.status is Status.DONE and stored is not None and job.captions is not None and len(job.captions) == 2
    published = [fields for _, fields in entries if b"pcm" in fields]
    assert [int(fields[b"index"]) for fields in published] == sorted(int(fields[b"index"]) for fields in published)
    finals = [fields for fields in published if fields[b"partial"] == b"0"]
    assert [int(fields[b"index"]) for fields in finals] == [0, 1]
    assert [(int(f[b"start"]), int(f[b"end_at"])) for f in finals] == [(cue.start, cue.end) for cue in job.captions]
    assert all(int(fields[b"start"]) == -1 for fields in published if fields[b"partial"] == b"1")
    assert sum(1 for fields in published if fields[b"partial"] == b"1" and fields[b"index"] == b"0") >= 2
    places = [int(fields[b"at"]) for fields in published]
    sizes = [len(fields[b"pcm"]) // 2 for fields in published]
    assert places == [sum(sizes[:i]) for i in range(len(sizes))], "each piece starts where the last ended"
    assert b"".join(pieces) == decode_to_pcm16(stored)


async def test_a_job_nobody_listens_to_streams_each_chunk_whole_and_a_late_listener_hears_every_sample(
    redis: Redis, serving: DecoderEngine
) -> None:
    """A job submitted without a listener (``listened`` False: the default) decodes each chunk whole at its end: its
    stream carries each chunk in one entry, none partial. A listener who attaches while it runs, and one who attaches
    once it is done, both get every sample: the stream, then the stored result, joined, is the stored audio."""
    text = "The first sentence is here. And then a second one follows it."
    async with running_worker(redis, serving, max_batch=4) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(text, format="wav"), single_flight=False)
        stream = worker.queue.keys.stream(job_id)
        assert await redis.xread({stream: "0"}, count=1, block=120_000), "attaches once the first chunk is out, not before"
        during = await asyncio.wait_for(collect(worker.queue, job_id), 120)
        job = await wait_final(worker.queue, job_id)
        after = await asyncio.wait_for(collect(worker.queue, job_id), 60)
        stored = await worker.queue.result(job_id)
        entries: Any = await redis.xrange(stream)
    assert job.status is Status.DONE and stored is not None and not job.params.listened
    published = [fields for _, fields in entries if b"pcm" in fields]
    assert [(int(fields[b"index"]), fields[b"partial"]) for fields in published] == [(0, b"0"), (1, b"0")]
    assert b"".join(during) == b"".join(after) == decode_to_pcm16(stored)


class _Scripted:
    """A piece decoder whose samples per call are given: when audio comes is all :func:`keep_ahead` reads."""

    def __init__(self, tokens_per_call: list[float]) -> None:
        self.calls = iter(tokens_per_call)

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return np.zeros(int(next(self.calls, 0) * 512), dtype=np.float32)

    def finish(self, states: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        return np.zeros(0, dtype=np.float32)


@pytest.mark.parametrize(
    ("tokens_per_call", "bound"),
    [
        # 32 tokens at step 40, then 32 every 32 steps: exactly real time, the listener never waits.
        ([32] * 10, 1.0),
        # 32 at 40, nothing at 72, 64 at 104: before step 104 the listener has had 64 steps to play 32 tokens.
        ([32, 0, 64] + [32] * 7, 0.5),
        # No audio until step 72: the clock starts there.
        ([0, 32] + [32] * 8, 1.0),
        # ChatTTS's 52-token field, the defaults: 31.5 at 40, then 20.5 at 104 and 64 at 168 (docs/decoder.md).
        ([31.5, 0, 20.5, 0, 64, 0, 64, 0, 64, 0], 52 / 128),
    ],
)
def test_keep_ahead_is_the_tightest_ratio_of_audio_handed_on_to_steps_since_the_first(
    tokens_per_call: list[float], bound: float
) -> None:
    assert keep_ahead(lambda: _Scripted(tokens_per_call), Cadence(32, 8), hidden=4) == pytest.approx(bound)


def test_a_row_that_hands_on_nothing_keeps_ahead_of_no_listener() -> None:
    assert keep_ahead(lambda: _Scripted([]), Cadence(32, 8), hidden=4) == 0.0


def test_a_request_prepared_beforehand_is_heard_as_one_prepared_when_added(engine: DecoderEngine) -> None:
    """:meth:`Scheduler.prepared` (what the preparation thread runs, beside the steps) does the text work :meth:`add`
    would do — the normaliser (numbers read out), ChatTTS's own normalisation, the sentence split — and a request added
    prepared is heard bit for bit as the same request added as it was."""
    made = scheduler(engine)
    plain = request(engine, 5, "It cost 3 dollars, they said.")
    prepared = made.prepared(plain)
    assert prepared.chunks is not None and len(prepared.chunks) == 1
    assert "3" not in "".join(prepared.chunks) and "three" in "".join(prepared.chunks).lower()
    assert made.prepared(prepared) is prepared
    made.add("as-is", plain)
    made.add("prepared", prepared)
    heard = drain(made)
    assert not heard.failed
    assert np.array_equal(heard.chunks["as-is"], heard.chunks["prepared"])
