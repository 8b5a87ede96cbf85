"""Playback accounting (ttsq/inference/playback.py): a listener's clock, the step-cost model, and the scheduler's
playback-aware ranking of waiting rows — on given times, no model (what the worker makes of the step cost, its stream
room: tests/unit/runtime/test_stream_admission.py)."""

from __future__ import annotations

import math

import pytest

from ttsq.inference.base import SynthesisRequest
from ttsq.inference.playback import TOKEN_AUDIO_S, Listener, StepCost
from ttsq.inference.sched.requests import RequestState as _Request
from ttsq.inference.sched.requests import RowState as _Row


def test_the_listener_plays_from_its_first_audio_and_reports_each_deliverys_slack() -> None:
    listener = Listener()
    assert listener.due(0.2) is None  # nothing to play yet: nothing is due
    assert listener.deliver(10.0, 2.0) is None  # the first audio starts the clock
    assert listener.due(0.2) == pytest.approx(11.8)
    assert listener.deliver(11.5, 1.0) == pytest.approx(0.5)  # half a second of audio was left
    assert listener.buffered_until == pytest.approx(13.0) and listener.underruns == 0


def test_audio_after_the_buffer_ran_out_is_an_underrun_and_playback_resumes_from_it() -> None:
    listener = Listener()
    listener.deliver(0.0, 1.0)
    assert listener.deliver(1.5, 1.0) == pytest.approx(-0.5)
    assert (listener.underruns, listener.stall_s, listener.buffered_until) == pytest.approx((1, 0.5, 2.5))
    assert listener.deliver(2.5, 0.5) == pytest.approx(0.0) and listener.underruns == 1  # just in time is in time
    assert listener.deliver(3.0, 0.0) is None and listener.delivered_s == pytest.approx(2.5)


def test_step_cost_fits_a_fixed_and_a_per_row_part_and_counts_the_rows_that_stay_real_time() -> None:
    cost = StepCost()
    assert cost.real_time_rows(0.8) is None  # no step seen: nothing to go by
    for rows in (1, 2, 4, 8):
        cost.observe(rows, 0.002 + 0.001 * rows)  # a fixed-cost engine: 2 ms a step + 1 ms a row
    assert cost.fit() == pytest.approx((0.002, 0.001))
    # 0.8 × 21.33 ms = 17.07 ms a step: 2 ms + 15 rows × 1 ms fits, 16 rows would not.
    assert cost.real_time_rows(0.8) == 15
    assert cost.predict(15) == pytest.approx(0.017) and (cost.predict(16) or 0.0) > 0.8 * TOKEN_AUDIO_S


def test_step_cost_at_one_row_count_is_taken_as_proportional_to_rows() -> None:
    cost = StepCost()
    cost.observe(4, 0.020)
    assert cost.fit() == pytest.approx((0.0, 0.005))
    assert cost.real_time_rows(1.0) == 4  # 21.3 ms / 5 ms


def test_a_step_slower_than_real_time_at_no_rows_keeps_no_row_real_time_and_a_free_one_is_bounded() -> None:
    slow = StepCost()
    for rows, seconds in ((1, 0.05), (2, 0.05)):
        slow.observe(rows, seconds)
    assert slow.real_time_rows(1.0) == 0
    free = StepCost()
    for rows in (1, 2):
        free.observe(rows, 0.0)
    assert free.real_time_rows(1.0) == 1 << 16


def test_step_cost_keeps_only_its_window_of_recent_steps() -> None:
    cost = StepCost(window=2)
    cost.observe(1, 1.0)
    cost.observe(2, 0.004)
    cost.observe(4, 0.008)
    assert cost.fit() == pytest.approx((0.0, 0.002))


def _request(key: str, arrival: int, arrived_at: float, margin_s: float | None = 0.5) -> _Request:
    request = SynthesisRequest(text="One. Two. Three.", speaker=None, seed=1)
    return _Request(key, request, "en", total=3, arrival=arrival, alone=False, arrived_at=arrived_at, margin_s=margin_s)


def test_the_scheduler_ranks_a_stream_about_to_run_dry_ahead_of_a_new_request_and_one_with_audio_to_spare_behind() -> None:
    playing = _request("playing", arrival=0, arrived_at=0.0)
    playing.played(1.0, 0, 2.0)  # its first chunk's 2 s of audio at 1.0 s: the listener runs out at 3.0 s
    assert playing.due(1) == pytest.approx(2.5)  # less the 0.5 s margin
    early, late = _request("early", arrival=1, arrived_at=2.0), _request("late", arrival=2, arrived_at=2.9)
    ranked = sorted([_Row(late, 0, "code", "x"), _Row(playing, 1, "code", "x"), _Row(early, 0, "code", "x")], key=_Row.priority)
    # A request that came at 2.0 s is due before the stream (2.5 s); one that came at 2.9 s waits behind it.
    assert [(row.request.key, row.index) for row in ranked] == [("early", 0), ("playing", 1), ("late", 0)]
    # Later chunks of a request nobody is hearing yet come after every started stream.
    assert _request("new", arrival=3, arrived_at=0.0).due(1) == math.inf


def test_the_listener_hears_chunks_in_order_whatever_order_they_are_ready_in() -> None:
    request = _request("r", arrival=0, arrived_at=0.0)
    request.played(1.0, 1, 1.0)  # the second chunk first: nothing to hear yet
    assert request.listener.started_at is None and request.due(1) == math.inf
    request.played(2.0, 0, 1.0)  # the first: both are heard, from 2.0 s
    assert request.listener.buffered_until == pytest.approx(4.0) and request.heard == 2


def test_without_playback_order_every_row_is_due_alike_and_first_chunks_go_first() -> None:
    playing, new = _request("playing", 0, 0.0, margin_s=None), _request("new", 1, 5.0, margin_s=None)
    playing.played(1.0, 0, 2.0)
    ranked = sorted([_Row(playing, 1, "code", "x"), _Row(new, 0, "code", "x")], key=_Row.priority)
    assert [(row.request.key, row.index) for row in ranked] == [("new", 0), ("playing", 1)]
