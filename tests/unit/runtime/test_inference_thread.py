"""The inference thread tells the worker's loop whenever the engine has room again: after every step, and after a
cancel that emptied it (the loop claims again only when it hears). Real tiny ChatTTS decoder."""

from __future__ import annotations

import threading

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
