"""Stream admission, the worker's side (ttsq/runtime/stream_admission.py): the stream room a measured step cost leaves,
the claims it allows and the room the heartbeat record reports — on given step times, no model, no Redis. The worker
loop that calls it, and the API that sums the reports: tests/integration/runtime/test_stream_admission.py and
tests/unit/api/test_stream_admission_api.py."""

from __future__ import annotations

from typing import Literal

from ttsq.inference.playback import TOKEN_AUDIO_S, Listener, StepCost
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.stream_admission import StreamAdmission, stream_room

Mode = Literal["off", "wait", "refuse"]


def measured(fixed_s: float, per_row_s: float) -> StepCost:
    """A step cost fitted to a fixed-cost engine's steps at several row counts."""
    cost = StepCost()
    for rows in (1, 2, 4, 8):
        cost.observe(rows, fixed_s + per_row_s * rows)
    return cost


def admission(mode: Mode, cost: StepCost | None = None) -> StreamAdmission:
    return StreamAdmission(mode, StepCost() if cost is None else cost, HeartbeatRecord(worker_id="w"))


def test_stream_room_starts_one_stream_on_an_idle_worker_and_none_past_the_real_time_rows() -> None:
    assert stream_room(None, 0, 0) == 1  # nothing measured, nothing in hand: one, to measure
    assert stream_room(None, 1, 1) == 0  # nothing measured yet: wait for the first step
    assert stream_room(0, 0, 0) == 1  # even a step cost that keeps no row real-time lets an idle worker work
    assert stream_room(5, 3, 3) == 2
    assert stream_room(5, 7, 4) == 0


def test_off_claims_up_to_the_batchs_room_and_reports_no_stream_room() -> None:
    off = admission("off", measured(0.05, 0.0))  # no row could stay real-time: off pays it no mind
    assert off.claim_limit(16, 0.8, rows_in_hand=10, jobs_in_hand=4) == 16
    assert off.record.stream_room is None


def test_wait_and_refuse_claim_no_more_than_the_stream_room_and_report_it() -> None:
    for mode in ("wait", "refuse"):
        # 2 ms a step + 1 ms a row: within 0.8 × 21.3 ms a step holds 15 rows; 10 in hand leave room for 5 streams.
        on = admission(mode, measured(0.002, 0.001))
        assert on.claim_limit(16, 0.8, rows_in_hand=10, jobs_in_hand=4) == 5
        assert on.record.stream_room == 5
        # The batch's room, where it is the smaller, is the limit; the heartbeat still reports the stream room.
        assert on.claim_limit(3, 0.8, rows_in_hand=10, jobs_in_hand=4) == 3
        assert on.record.stream_room == 5
        # A tighter target holds fewer rows: 0.5 × 21.3 ms less 2 ms is 8 rows.
        assert on.claim_limit(16, 0.5, rows_in_hand=3, jobs_in_hand=3) == 5
        # Past the real-time rows: no claim, and a room of nothing for the API's refuse.
        assert on.claim_limit(16, 0.8, rows_in_hand=20, jobs_in_hand=6) == 0
        assert on.record.stream_room == 0


def test_before_any_step_an_idle_worker_claims_one_job_and_a_busy_one_none() -> None:
    on = admission("wait")
    assert on.claim_limit(16, 0.8, rows_in_hand=0, jobs_in_hand=0) == 1
    assert on.record.stream_room == 1
    assert on.claim_limit(16, 0.8, rows_in_hand=1, jobs_in_hand=1) == 0
    assert on.record.stream_room == 0


def test_the_step_cost_is_the_workers_own_so_each_step_it_measures_moves_the_room() -> None:
    cost = StepCost()
    on = admission("wait", cost)
    assert on.claim_limit(16, 0.8, rows_in_hand=2, jobs_in_hand=2) == 0  # nothing measured yet
    for rows in (1, 2, 4, 8):
        cost.observe(rows, 0.002 + 0.001 * rows)
    assert on.claim_limit(16, 0.8, rows_in_hand=2, jobs_in_hand=2) == 13


def _simulate(mode: Mode, streams: int = 10, chunks: int = 3, tokens: int = 48) -> list[tuple[float | None, Listener]]:
    """A decode loop on a fixed-cost engine (2 ms a step + 3 ms a row), on an injected clock: ``streams`` requests queued
    at 0, each ``chunks`` chunks of ``tokens`` steps decoded one after another, each chunk's audio delivered to its
    listener when it ends; each step, the loop claims what stream admission in ``mode`` allows. Returns each stream's
    (start time, listener)."""
    clock = 0.0
    cost = StepCost()
    loop = admission(mode, cost)
    queued = list(range(streams))
    started: dict[int, float] = {}
    progress = dict.fromkeys(range(streams), 0)  # tokens decoded of the stream's whole text
    listeners = [Listener() for _ in range(streams)]
    active: list[int] = []
    while queued or active:
        room = loop.claim_limit(len(queued), 0.8, rows_in_hand=len(active), jobs_in_hand=len(active))
        for _ in range(room):
            stream = queued.pop(0)
            started[stream] = clock
            active.append(stream)
        seconds = 0.002 + 0.003 * len(active)
        clock += seconds
        cost.observe(len(active), seconds)
        for stream in list(active):
            progress[stream] += 1
            if progress[stream] % tokens == 0:
                listeners[stream].deliver(clock, tokens * TOKEN_AUDIO_S)
                if progress[stream] == chunks * tokens:
                    active.remove(stream)
    return [(started.get(n), listeners[n]) for n in range(streams)]


def test_beyond_the_real_time_rows_new_streams_wait_and_the_started_ones_never_run_dry() -> None:
    # Ten rows at once: 32 ms a step, 48 steps a chunk (1.54 s) for 1.02 s of audio: every listener stalls.
    unchecked = _simulate("off")
    assert all(listener.underruns == 2 for _, listener in unchecked)  # at its second and third chunks
    # Stream admission: a step may take 0.8 × 21.3 ms, so 5 rows; the other streams wait in the queue, then start.
    checked = _simulate("wait")
    assert all(listener.underruns == 0 and listener.delivered_s > 0 for _, listener in checked)
    waited = [at for at, _ in checked if at is not None and at > 0]
    assert len(waited) >= 5, checked
