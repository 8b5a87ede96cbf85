"""A stream heard across jobs in the scheduler: a realtime session's chunk after its first is due when the stream's
listener runs out of audio, not at its arrival, and that listener is the one its earlier chunk played into, so a gap
between the two is an underrun. Real tiny ChatTTS on ttsq's decoder; the scheduler's clock is the test's."""

from __future__ import annotations

import pytest

from ttsq.inference.base import ChunkReady, SynthesisRequest
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.sched.scheduler import Scheduler
from ttsq.inference.stream_listeners import StreamCue

MARGIN_S = 0.5
STREAM = "session-1:context-1"


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def scheduler(engine: DecoderEngine, clock: Clock) -> Scheduler:
    """One slot, playback-aware, whole chunks (no pieces), on ``clock``."""
    made = engine._scheduler(1, engine._limits(), oom_recover_s=60, capture=False)
    made.clock = made.audio.clock = clock
    made.playback_margin_s = MARGIN_S
    return made


def request(engine: DecoderEngine, seed: int, stream: StreamCue | None = None) -> SynthesisRequest:
    return SynthesisRequest(text="A short sentence.", speaker=engine.speaker_from_seed(seed), seed=seed, stream=stream)


def finished(made: Scheduler) -> list[str]:
    """Step until idle: the keys whose chunks were ready, in order."""
    keys = []
    while made.busy:
        keys += [event.key for event in made.step() if isinstance(event, ChunkReady)]
    return keys


def test_a_continuation_due_before_a_new_streams_first_chunk_takes_the_slot_first_and_its_gap_is_an_underrun(
    tiny_decoder_engine: DecoderEngine,
) -> None:
    clock = Clock()
    made = scheduler(tiny_decoder_engine, clock)
    made.add("chunk-0", request(tiny_decoder_engine, 3, StreamCue(STREAM, continues=False, left_s=0.0)))
    assert finished(made) == ["chunk-0"]
    listener = made.streams.listener(StreamCue(STREAM, continues=False, left_s=0.0), clock.now)
    runs_out = listener.buffered_until
    assert runs_out > clock.now, "its audio was heard from the clock's now"
    clock.now = runs_out + 5.0  # the listener ran dry five seconds ago
    made.add("new-stream", request(tiny_decoder_engine, 4))  # due at its arrival: now
    # The API's own count says the listener ran out even before that (a floor): the account here stands.
    made.add("chunk-1", request(tiny_decoder_engine, 5, StreamCue(STREAM, continues=True, left_s=-6.0)))
    assert finished(made) == ["chunk-1", "new-stream"], "due when its listener ran out, less the margin: before now"
    assert listener.underruns == 1 and listener.stall_s == pytest.approx(5.0), "the gap between the two chunks"


def test_a_continuation_whose_stream_was_not_heard_here_is_due_by_what_the_api_said(tiny_decoder_engine: DecoderEngine) -> None:
    """Its earlier chunks ran elsewhere: its due time is the API's floor, so one with audio to spare waits behind a new
    stream, and one whose listener has run dry goes first."""
    clock = Clock()
    made = scheduler(tiny_decoder_engine, clock)
    made.add("new-stream", request(tiny_decoder_engine, 4))
    made.add("spare", request(tiny_decoder_engine, 5, StreamCue("elsewhere-1", continues=True, left_s=3.0)))
    made.add("dry", request(tiny_decoder_engine, 6, StreamCue("elsewhere-2", continues=True, left_s=0.2)))
    assert finished(made) == ["dry", "new-stream", "spare"]


def test_continuations_leave_the_slot_kept_for_first_chunks_free(tiny_decoder_engine: DecoderEngine) -> None:
    """Two sessions' next jobs (each a first chunk of its job, but not of its stream) in two slots, one kept for first
    chunks: they take one slot between them, and a new stream's first chunk starts at the next step."""
    made = tiny_decoder_engine._scheduler(2, tiny_decoder_engine._limits(), oom_recover_s=60, capture=False)
    made.first_chunk_slots = 1
    made.add("a-1", request(tiny_decoder_engine, 3, StreamCue("session-a", continues=True, left_s=1.0)))
    made.add("b-1", request(tiny_decoder_engine, 4, StreamCue("session-b", continues=True, left_s=1.0)))
    made.step()
    assert (made.active_rows, made.waiting_rows) == (1, 1), "a continuation took the slot kept for first chunks"
    made.add("new", request(tiny_decoder_engine, 5, StreamCue("session-c", continues=False, left_s=0.0)))
    made.step()
    assert made.active_rows == 2 and made.waiting_rows == 1, "the new stream's first chunk went straight into its slot"
    assert sorted(finished(made)) == ["a-1", "b-1", "new"]
