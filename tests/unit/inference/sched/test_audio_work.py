"""The rows whose pieces are due in the same step are decoded together, in one task of the audio thread
(:meth:`~ttsq.inference.sched.audio_work.AudioWork.flush`), and each row's audio is what it would be decoded alone, in
the order asked, whoever else was in its batch or left it. The tiny checkpoint's real decoder, Vocos and piece
decoders (:class:`~ttsq.inference.audio.lead.LeadThenExact`), driven on a schedule of hand-offs as the scheduler's."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settings import Settings
from tests.support.conftest_engine import pieced_engine
from ttsq.inference.audio.handoff import HandOff
from ttsq.inference.base import BatchEvent, PieceReady, SynthesisRequest
from ttsq.inference.chattts_rows import audible
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.sched.audio_work import AudioWork
from ttsq.inference.sched.background import RankedExecutor
from ttsq.inference.sched.requests import RequestState, RowState

DEFAULTS = Settings(_env_file=None)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint_dir: Any) -> Iterator[DecoderEngine]:
    made = pieced_engine()
    yield made
    made.release_memory()


@pytest.fixture(scope="module")
def handoff(engine: DecoderEngine) -> HandOff:
    made = engine._piecing()
    assert made is not None and made.together is not None
    return made


@dataclasses.dataclass
class Heard:
    pieces: dict[str, list[npt.NDArray[np.float32]]] = dataclasses.field(default_factory=dict)
    chunks: dict[str, npt.NDArray[np.float32]] = dataclasses.field(default_factory=dict)
    failed: dict[str, BaseException] = dataclasses.field(default_factory=dict)
    waves: dict[str, npt.NDArray[np.float32]] = dataclasses.field(default_factory=dict)
    """Each row's raw samples (before the near-silent ones are dropped), as its piece decoder made them."""

    def take(self, events: list[BatchEvent]) -> None:
        for event in events:
            if isinstance(event, PieceReady):
                assert event.key not in self.chunks, "a piece after its chunk's end"
                self.pieces.setdefault(event.key, []).append(event.chunk.samples)


def work(engine: DecoderEngine, pieces: HandOff, heard: Heard, pool: RankedExecutor | None, gone: set[str]) -> AudioWork:
    def chunk_ready(row: RowState, samples: npt.NDArray[np.float32], events: list[BatchEvent], steps: int) -> None:
        heard.chunks[row.request.key] = samples
        assert row.audio is not None and row.audio.wave is not None
        heard.waves[row.request.key] = np.concatenate(row.audio.wave)

    def fail(key: str, error: BaseException, events: list[BatchEvent]) -> None:
        heard.failed[key] = error

    return AudioWork(
        engine._loaded_rows(),
        engine._limits(),
        pool,
        pieces,
        lambda: 0.0,
        alive=lambda request: request.key not in gone,
        chunk_ready=chunk_ready,
        fail=fail,
    )


def row_of(engine: DecoderEngine, key: str, arrival: int) -> RowState:
    request = SynthesisRequest(text="Some words.", speaker=engine.speaker_from_seed(3), seed=3)
    # Anchored: its piece decoder keeps the raw wave, and the chunk's end makes the request's speaker prompt of it.
    state = RequestState(key=key, request=request, lang="en", total=2, arrival=arrival, alone=False, anchored=True)
    return RowState(request=state, index=0, phase="code", text="Some words.")


def play(
    engine: DecoderEngine,
    pieces: HandOff,
    rows_states: list[npt.NDArray[np.float32]],
    starts: list[int],
    *,
    pool: RankedExecutor | None,
    leave: dict[int, int] | None = None,
    arrivals: list[int] | None = None,
    busy_until: int | None = None,
) -> Heard:
    """Rows of these states placed at these steps and stepped once a step, as the scheduler's code decoder steps its
        slots: a row hands its new states on when its piece is due, and at its last state it ends. ``leave``: a row's
        request is cancelled at that step (its decodes dropped, queued or in a batch); ``arrivals``: the rows' ranks (their
    requests' arrival; by default their order); ``busy_until``: the audio thread runs nothing else until that step, so
    what is asked meanwhile waits in its queue, in rank order."""
    heard, gone = Heard(), set[str]()
    audio = work(engine, pieces, heard, pool, gone)
    rows = [row_of(engine, f"r{index}", at) for index, at in enumerate(arrivals or range(len(rows_states)))]
    busy = threading.Event()
    if busy_until is not None:
        assert pool is not None
        pool.submit((-math.inf,), busy.wait)
    longest = max(len(states) for states in rows_states)
    hiddens = torch.zeros((len(rows), longest, rows_states[0].shape[1]))
    for slot, states in enumerate(rows_states):
        hiddens[slot, : len(states)] = torch.from_numpy(states)
    live: list[RowState] = []
    step = 0
    while live or step <= max(starts):
        events: list[BatchEvent] = []
        for slot, row in enumerate(rows):
            if step == starts[slot]:
                row.slot = slot
                audio.placed(row)
                live.append(row)
        for slot, at in (leave or {}).items():
            if step == at and rows[slot] in live:
                gone.add(rows[slot].request.key)
                audio.drop(lambda entry: entry.row.request.key in gone)
                live.remove(rows[slot])
        ending = [row for row in live if row.tokens + 1 >= len(rows_states[rows.index(row)])]
        for row in ending:  # as the scheduler: a row that ended this step is out of its slot before the hand-on
            live.remove(row)
            assert row.slot is not None
            audio.ended(row, hiddens[row.slot, : len(rows_states[row.slot])], events)
        audio.hand_on(live, hiddens, events)
        if step == busy_until:
            busy.set()
        audio.collect(events)
        heard.take(events)
        step += 1
    while audio.pending:  # the rest settles in the audio thread
        wait(audio.futures(), return_when=FIRST_COMPLETED)
        events = []
        audio.collect(events)
        heard.take(events)
    return heard


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(2, 140), min_size=1, max_size=5),
    offsets=st.lists(st.one_of(st.just(0), st.integers(0, 60)), min_size=5, max_size=5),
    threaded=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_rows_decoded_together_each_hear_what_they_would_alone_in_order(
    engine: DecoderEngine, handoff: HandOff, lengths: list[int], offsets: list[int], threaded: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    states = [
        rng.standard_normal((length, 2 * int(engine._loaded_chat().config.decoder.idim))).astype(np.float32) for length in lengths
    ]
    starts = offsets[: len(lengths)]
    pool = RankedExecutor("test-audio") if threaded else None
    try:
        together = play(engine, handoff, states, starts, pool=pool)
        alone = [play(engine, dataclasses.replace(handoff, together=None), [row], [0], pool=None) for row in states]
    finally:
        if pool is not None:
            pool.shutdown()
    assert not together.failed
    for index, solo in enumerate(alone):
        key = f"r{index}"
        # Bit for bit what it hears decoded alone: each piece as it comes, and the chunk at its end.
        assert np.array_equal(together.waves[key], solo.waves["r0"])
        pieces, expected = together.pieces.get(key, []), solo.pieces.get("r0", [])
        assert len(pieces) == len(expected) and all(np.array_equal(a, b) for a, b in zip(pieces, expected, strict=True))
        assert np.array_equal(together.chunks[key], solo.chunks["r0"])
        # Handed on as decoded, in order: the pieces, then the rest, are the row's own samples less the silent ones.
        assert np.array_equal(together.chunks[key], audible(together.waves[key]))
        sent = sum(piece.size for piece in pieces)
        assert np.array_equal(np.concatenate([*pieces, together.chunks[key][sent:]]), together.chunks[key])


def test_a_row_that_leaves_its_batch_holds_none_of_the_others(engine: DecoderEngine, handoff: HandOff) -> None:
    rng = np.random.default_rng(4)
    hidden = 2 * int(engine._loaded_chat().config.decoder.idim)
    states = [rng.standard_normal((120, hidden)).astype(np.float32) for _ in range(3)]
    pool = RankedExecutor("test-audio")
    try:
        left = play(engine, handoff, states, [0, 0, 0], pool=pool, leave={1: 50})
    finally:
        pool.shutdown()
    alone = play(engine, dataclasses.replace(handoff, together=None), [states[0]], [0], pool=None)
    assert set(left.chunks) == {"r0", "r2"} and not left.failed
    assert np.array_equal(left.chunks["r0"], alone.chunks["r0"])


def test_a_failure_of_the_run_the_rows_share_fails_each_of_them(engine: DecoderEngine, handoff: HandOff) -> None:
    def broken(*_args: Any) -> list[npt.NDArray[np.float32]]:
        raise RuntimeError("the decoder broke")

    rng = np.random.default_rng(5)
    hidden = 2 * int(engine._loaded_chat().config.decoder.idim)
    states = [rng.standard_normal((60, hidden)).astype(np.float32) for _ in range(2)]
    heard = play(engine, dataclasses.replace(handoff, together=broken), states, [0, 0], pool=None)
    assert set(heard.failed) == {"r0", "r1"} and all("broke" in str(error) for error in heard.failed.values())


def test_a_row_decoded_with_a_more_urgent_one_is_never_decoded_ahead_of_its_own_earlier_pieces(
    engine: DecoderEngine, handoff: HandOff
) -> None:
    """Rows 0 and 1 hand on at step 40 (a task ranked as row 0); row 2, the most urgent, placed later, hands on with
    them at step 72. Queued both behind a busy audio thread, the second task must not run first: row 0's and row 1's
    pieces would be decoded out of order."""
    rng = np.random.default_rng(6)
    hidden = 2 * int(engine._loaded_chat().config.decoder.idim)
    states = [rng.standard_normal((120, hidden)).astype(np.float32) for _ in range(3)]
    pool = RankedExecutor("test-audio")
    try:
        heard = play(engine, handoff, states, [0, 0, 32], pool=pool, arrivals=[1, 2, 0], busy_until=80)
    finally:
        pool.shutdown()
    assert not heard.failed
    for index, row in enumerate(states):
        alone = play(engine, dataclasses.replace(handoff, together=None), [row], [0], pool=None)
        assert np.array_equal(heard.chunks[f"r{index}"], alone.chunks["r0"])
