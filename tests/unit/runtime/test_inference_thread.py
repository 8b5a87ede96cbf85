"""The inference thread tells the worker's loop whenever the engine has room again: after every step, and after a
cancel that emptied it (the loop claims again only when it hears). Real tiny ChatTTS decoder."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ttsq.inference.base import SynthesisRequest
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.playback import StepCost
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.inference_thread import InferenceThread, StepReport


def test_a_cancel_that_empties_the_engine_is_reported(tiny_decoder_engine: DecoderEngine) -> None:
    """A worker with no room (rows waiting for slots) sleeps until a report. A job cancelled while it ran
    once dropped every row between two steps; the step before had reported rows still waiting, nothing was reported after,
    and the worker never claimed again. Here the request and its cancel are taken between the same two steps, so no
    step runs: the cancel alone must be reported, with the engine idle."""
    reported = threading.Event()
    reports: list[tuple[StepReport, bool]] = []
    thread: InferenceThread

    def report(step: StepReport) -> None:  # called in the inference thread, between steps
        batcher = thread.batcher
        reports.append((step, batcher is not None and batcher.busy))
        reported.set()

    thread = InferenceThread(report, HeartbeatRecord(worker_id="test"), job_timeout_s=120)
    thread.start(lambda: tiny_decoder_engine.batcher(2, oom_recover_s=1.0)).result(timeout=120)
    speaker = tiny_decoder_engine.speaker_from_seed(3)
    try:
        paused = threading.Event()
        thread.call(paused.wait)  # holds the thread between steps while both commands are queued behind it
        thread.add("job", lambda: SynthesisRequest(text="One more sentence. " * 6, speaker=speaker, seed=3))
        thread.cancel("job")
        paused.set()
        assert reported.wait(30), "the cancel that emptied the engine was never reported: the worker would sleep"
        assert [(step.rows, step.events, busy) for step, busy in reports] == [(0, [], False)]
    finally:
        thread.stop()
        thread.join(10)


class _Steps:
    """The thread's reports, as they come: how many stepped rows, and each event's request."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.rows: list[int] = []
        self.keys: list[str] = []

    def report(self, step: StepReport) -> None:
        with self.lock:
            self.rows.append(step.rows)
            self.keys += [event.key for event in step.events]
            self.lock.notify_all()

    def wait(self, until: Callable[[], bool], what: str) -> None:
        with self.lock:
            assert self.lock.wait_for(until, timeout=120), what

    def stepped(self) -> int:
        return sum(1 for rows in self.rows if rows > 0)


def test_a_request_being_prepared_never_stalls_the_rows_in_flight(tiny_decoder_engine: DecoderEngine) -> None:
    """A request's voice and text are prepared beside the stepping thread: while one is held in its preparation, the
    request already in flight goes on stepping, and the held one joins once prepared and is heard to its end. Built in
    the stepping thread (as once), the held preparation would stop every step."""
    steps = _Steps()
    thread = InferenceThread(steps.report, HeartbeatRecord(worker_id="test"), job_timeout_s=120)
    thread.start(lambda: tiny_decoder_engine.batcher(2, oom_recover_s=1.0)).result(timeout=120)
    speaker = tiny_decoder_engine.speaker_from_seed(3)
    release = threading.Event()
    built_in: list[str] = []

    def held() -> SynthesisRequest:
        built_in.append(threading.current_thread().name)
        release.wait(120)
        return SynthesisRequest(text="A held sentence.", speaker=speaker, seed=4)

    try:
        thread.add("playing", lambda: SynthesisRequest(text="One more sentence. " * 6, speaker=speaker, seed=3))
        steps.wait(lambda: steps.stepped() > 0, "the first request never stepped")
        thread.add("held", held)
        before = steps.stepped()
        steps.wait(lambda: steps.stepped() >= before + 5, "the rows in flight stopped while a request was prepared")
        assert "held" not in steps.keys and built_in and not built_in[0].startswith("ttsq-infer")
        release.set()
        steps.wait(lambda: "held" in steps.keys and "playing" in steps.keys, "a request did not end")
    finally:
        release.set()
        thread.stop()
        thread.join(10)


def test_a_request_cancelled_while_it_is_prepared_never_runs(tiny_decoder_engine: DecoderEngine) -> None:
    """Cancelled before its preparation ended, a request never joins the batcher: nothing of it is heard, and the
    requests added after it still are."""
    steps = _Steps()
    thread = InferenceThread(steps.report, HeartbeatRecord(worker_id="test"), job_timeout_s=120)
    thread.start(lambda: tiny_decoder_engine.batcher(2, oom_recover_s=1.0)).result(timeout=120)
    speaker = tiny_decoder_engine.speaker_from_seed(3)
    release = threading.Event()

    def held() -> SynthesisRequest:
        release.wait(120)
        return SynthesisRequest(text="A cancelled sentence.", speaker=speaker, seed=4)

    try:
        thread.add("cancelled", held)
        thread.add("after", lambda: SynthesisRequest(text="The next one.", speaker=speaker, seed=5))
        thread.cancel("cancelled")
        release.set()
        steps.wait(lambda: "after" in steps.keys, "the request added after the cancelled one was never heard")
        assert "cancelled" not in steps.keys
    finally:
        release.set()
        thread.stop()
        thread.join(10)


def test_the_audio_threads_time_counts_in_the_steps_cost(tiny_decoder_engine: DecoderEngine) -> None:
    """On a CPU a row's audio is decoded in a thread beside the decode loop (``OVERLAP_PREFILL_AND_AUDIO``): its time
    comes with the step reports, and the step cost the worker fits its stream room to (``cost_s``) includes it."""
    reports: list[StepReport] = []
    done = threading.Event()

    def report(step: StepReport) -> None:
        reports.append(step)
        if any(event.key == "job" and type(event).__name__ == "ChunkReady" for event in step.events):
            done.set()

    thread = InferenceThread(report, HeartbeatRecord(worker_id="test"), job_timeout_s=120)
    thread.start(lambda: tiny_decoder_engine.batcher(2, oom_recover_s=1.0)).result(timeout=120)
    speaker = tiny_decoder_engine.speaker_from_seed(3)
    try:
        thread.add("job", lambda: SynthesisRequest(text="One more sentence, spoken to its end.", speaker=speaker, seed=3))
        assert done.wait(60)
    finally:
        thread.stop()
        thread.join(10)
    stepped = [step for step in reports if step.rows]
    assert sum(step.beside_s for step in stepped) > 0  # its pieces' audio, decoded beside the loop
    alone, counted = StepCost(), StepCost()
    for step in stepped:
        alone.observe(step.rows, step.seconds)
        counted.observe(step.rows, step.cost_s)
    assert (counted.predict(1) or 0) > (alone.predict(1) or 0)


def test_requests_added_together_start_in_one_step_however_fast_each_is_prepared(tiny_decoder_engine: DecoderEngine) -> None:
    """A claim's jobs are added together (:meth:`InferenceThread.together`): the first, prepared long before the
    second is even added, still waits for it, and both are in the engine at its first step. Added one by one, the
    first would have started alone (its preparation done, the engine idle)."""
    steps = _Steps()
    in_engine: list[set[str]] = []
    thread: InferenceThread

    def report(step: StepReport) -> None:  # in the inference thread, between steps
        if step.rows and thread.batcher is not None:
            in_engine.append(set(thread.batcher.requests()))
        steps.report(step)

    thread = InferenceThread(report, HeartbeatRecord(worker_id="test"), job_timeout_s=120)
    thread.start(lambda: tiny_decoder_engine.batcher(2, oom_recover_s=1.0)).result(timeout=120)
    speaker = tiny_decoder_engine.speaker_from_seed(3)
    prepared = threading.Event()

    def first() -> SynthesisRequest:
        prepared.set()
        return SynthesisRequest(text="The first of a claim, a little longer.", speaker=speaker, seed=3)

    try:
        with thread.together():
            thread.add("first", first)
            assert prepared.wait(60)
            # Time for the engine to start the first alone, were it handed over already (it must not be).
            with steps.lock:
                steps.lock.wait_for(lambda: steps.stepped() > 0, timeout=2)
            thread.add("second", lambda: SynthesisRequest(text="The second of it, a little longer.", speaker=speaker, seed=4))
        steps.wait(lambda: "first" in steps.keys and "second" in steps.keys, "a request did not end")
        assert in_engine[0] == {"first", "second"}
    finally:
        thread.stop()
        thread.join(10)
