"""Stream admission, the worker's side (ttsq/runtime/stream_admission.py): the stream room a measured step cost leaves,
the claims it allows and the room the heartbeat record reports — on given step times, no model, no Redis. The worker
loop that calls it, and the API that sums the reports: tests/integration/runtime/test_stream_admission.py and
tests/unit/api/test_stream_admission_api.py."""

from __future__ import annotations

from typing import Literal

import pytest

from ttsq.inference.playback import MAX_ROWS, TOKEN_AUDIO_S, Listener, StepCost
from ttsq.runtime.health import HeartbeatRecord
from ttsq.runtime.stream_admission import CEILING_HOLD_S, Slack, StreamAdmission, slack_of, stream_room

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


def test_the_jobs_in_hand_count_as_rows_before_the_engine_has_counted_them() -> None:
    # Three jobs just claimed, still on their way into the inference thread: the engine counts no row of them yet.
    assert stream_room(5, 0, 3) == 2
    # A fit that holds fewer rows than the jobs in hand leaves no room.
    assert stream_room(2, 0, 3) == 0
    on = admission("wait", measured(0.002, 0.001))  # 15 rows
    assert on.claim_limit(16, 0.8, rows_in_hand=0, jobs_in_hand=15) == 0


def playing(*deliveries: tuple[float, float]) -> Listener:
    """A listener that has had these ``(at, seconds)`` deliveries."""
    listener = Listener()
    for at, seconds in deliveries:
        listener.deliver(at, seconds)
    return listener


def well(playing: int) -> Slack:
    """``playing`` streams playing, none of them short."""
    return Slack(playing, short=False)


def test_a_started_stream_under_its_margin_holds_the_room_at_nothing_until_it_recovers() -> None:
    listener = playing((8.0, 1.0), (8.5, 1.0), (9.0, 1.0))  # past its first pieces; its audio runs out at 11.0
    ahead = [playing((0.0, 30.0), (1.0, 1.0)) for _ in range(3)]  # far ahead
    others = [*ahead, Listener()]  # and one starting
    assert slack_of([listener, *others], 10.4, 0.5) == Slack(4, short=False)  # 0.6 s left
    short = slack_of([listener, *others], 10.6, 0.5)  # 0.4 s left: read now, before its next piece
    assert short == Slack(4, short=True)
    on = admission("wait", measured(0.002, 0.001))  # the fit leaves room for 5 more streams
    assert on.claim_limit(16, 0.8, rows_in_hand=10, jobs_in_hand=5, slack=short) == 0
    assert on.record.stream_room == 0  # what the API's refuse reads
    # Streams leave, and as long as one is short, still none starts.
    assert on.claim_limit(16, 0.8, rows_in_hand=6, jobs_in_hand=5, slack=short) == 0
    listener.deliver(10.7, 1.0)  # its next piece: 1.3 s left, more than before
    recovered = slack_of([listener, *others], 10.7, 0.5)
    assert recovered == Slack(4, short=False)
    # The room is back: the fit's 15 rows less the 6 in hand, claimed as the slow start allows (4 playing, 1 starting).
    assert on.claim_limit(16, 0.8, rows_in_hand=6, jobs_in_hand=5, slack=recovered) == 1
    assert on.record.stream_room == 9
    # A stream with its first piece only is short: nothing shows yet that it keeps ahead. In its next pieces (they come
    # unevenly) it is held to no margin, only to having audio at all, while it gains on its first piece.
    fresh = playing((10.0, 0.7))
    assert slack_of([fresh], 10.1, 0.5) == Slack(1, short=True, losing=False)
    fresh.deliver(10.3, 0.7)  # 1.1 s after it, more than the first piece's 0.7 s
    assert not slack_of([fresh], 10.9, 0.5).short  # 0.5 s left, under the margin
    assert slack_of([fresh], 11.5, 0.5).short  # none left
    # On the fit alone (no slack given), or with stream admission off, the listeners are paid no mind.
    assert admission("wait", measured(0.002, 0.001)).claim_limit(16, 0.8, 10, 5) == 5
    assert admission("off").claim_limit(16, 0.8, rows_in_hand=10, jobs_in_hand=5, slack=short) == 16


def test_a_stream_whose_audio_comes_slower_than_it_plays_is_short_before_it_reaches_its_margin() -> None:
    # A first piece of 2.5 s, then 0.5 s every 0.7 s: its buffer after each piece is 2.3 s, 2.1 s, then 1.9 s.
    losing = playing((0.0, 2.5), (0.7, 0.5), (1.4, 0.5), (2.1, 0.5))
    assert losing.left(2.1) == pytest.approx(1.9)
    # 1.9 s left now, well over the margin: short already, for its audio comes slower than it plays.
    assert slack_of([losing], 2.1, 0.5).short
    # Pieces that come unevenly but as fast as they play, on the whole: a long wait for the third is no trend.
    uneven = playing((0.0, 0.7), (0.35, 0.7), (1.4, 1.4))  # after the first, 2.1 s of audio in 1.4 s
    assert not slack_of([uneven], 1.4, 0.5).short
    steady = playing((0.0, 2.5), (0.7, 0.7), (1.4, 0.7))  # 2.5 s after each piece: holding its own
    assert not slack_of([steady], 1.4, 0.5).short


def test_streams_start_no_faster_than_the_ones_before_them_are_heard_keeping_ahead() -> None:
    on = admission("wait", measured(0.002, 0.0))  # a fit with no cost per row: room without end
    assert on.claim_limit(40, 0.8, 0, 0, slack=well(0)) == 1  # an idle worker: one
    assert on.claim_limit(40, 0.8, 1, 1, slack=well(0)) == 0  # until it plays, nothing more
    assert on.record.stream_room == MAX_ROWS - 1  # the room reported is the room's: the slow start paces the claims
    assert on.claim_limit(40, 0.8, 1, 1, slack=well(1)) == 1
    assert on.claim_limit(40, 0.8, 2, 2, slack=well(1)) == 0
    assert on.claim_limit(40, 0.8, 2, 2, slack=well(2)) == 1
    assert on.claim_limit(40, 0.8, 4, 4, slack=well(4)) == 2  # half as many again as are heard playing
    assert on.claim_limit(40, 0.8, 8, 8, slack=well(8)) == 4
    assert on.claim_limit(40, 0.8, 8, 8, slack=well(5)) == 0  # 3 still starting: more than half of 5
    # On the fit alone all 40 would start at once.
    assert admission("wait", measured(0.002, 0.0)).claim_limit(40, 0.8, 1, 1) == 40
    # Jobs nobody listens to (a batch backlog) never play: they are no streams starting, and hold none back.
    assert on.claim_limit(40, 0.8, 3, 3, slack=well(0), streams_in_hand=0) == 1
    assert on.claim_limit(40, 0.8, 5, 5, slack=well(2), streams_in_hand=2) == 1


def _contended(slack: bool, streams: int = 16, arrive_every: int = 10) -> list[Listener]:
    """A decode loop whose steps take twice what the worker measures of them (another process takes half the core: the
    fit lags what the cores give), on an injected clock: a stream queued every ``arrive_every`` steps, each 96 tokens
    streamed in pieces of 32 (``PIECE_TOKENS``' default), held to a margin of 0.2 s. Stream admission ``wait``, with
    the listeners' slack or on the fitted cost alone. Returns each stream's listener."""
    clock = 0.0
    cost = StepCost()
    loop = admission("wait", cost)
    queued: list[int] = []
    progress = dict.fromkeys(range(streams), 0)
    listeners = [Listener() for _ in range(streams)]
    active: list[int] = []
    step = 0
    while step <= streams * arrive_every or queued or active:
        if step % arrive_every == 0 and step // arrive_every < streams:
            queued.append(step // arrive_every)
        heard = slack_of((listeners[n] for n in active), clock, 0.2) if slack else None
        room = loop.claim_limit(len(queued), 0.8, len(active), len(active), slack=heard, now=clock)
        for _ in range(room):
            active.append(queued.pop(0))
        measured_s = 0.002 + 0.0015 * len(active)
        clock += 2 * measured_s
        cost.observe(len(active), measured_s)
        for stream in list(active):
            progress[stream] += 1
            if progress[stream] % 32 == 0:
                listeners[stream].deliver(clock, 32 * TOKEN_AUDIO_S)
                if progress[stream] == 96:
                    active.remove(stream)
        step += 1
    return listeners


def test_wait_on_the_listeners_slack_holds_claims_a_lagging_fit_allows_and_no_started_stream_runs_dry() -> None:
    # The fit says 10 rows stay real-time; the steps really keep 5: on the fit alone the streams it lets in stall.
    assert sum(listener.underruns for listener in _contended(slack=False)) > 0
    held = _contended(slack=True)
    assert all(listener.underruns == 0 and listener.delivered_s > 0 for listener in held)


def test_a_stream_losing_ground_sets_a_ceiling_under_the_rows_in_hand_that_rises_a_row_at_a_time_once_it_is_over() -> None:
    on = admission("wait", measured(0.002, 0.001))  # the fit: 15 rows
    assert on.claim_limit(16, 0.8, 6, 6, slack=well(6), now=0.0) == 3
    assert on.claim_limit(16, 0.8, 6, 6, slack=Slack(6, short=True, losing=True), now=1.0) == 0  # 6 rows: too many
    assert on.ceiling.rows == 5
    assert on.claim_limit(16, 0.8, 5, 5, slack=Slack(5, short=True, losing=True), now=1.5) == 0  # the ceiling stays
    assert on.ceiling.rows == 5
    # Recovered with 4 rows: one more stream, not the fit's 11; the streams that queued meanwhile wait.
    assert on.claim_limit(16, 0.8, 4, 4, slack=well(4), now=2.0) == 1
    assert on.claim_limit(16, 0.8, 4, 4, slack=well(4), now=2.0 + CEILING_HOLD_S - 0.1) == 1
    assert on.claim_limit(16, 0.8, 4, 4, slack=well(4), now=2.0 + CEILING_HOLD_S) == 2  # clear for the hold: a row more
    assert on.ceiling.rows == 6
    # A stream under its margin but not losing ground (a new stream between its first pieces) holds the room at 0 for
    # as long, and sets no ceiling.
    fresh = admission("wait", measured(0.002, 0.001))
    assert fresh.claim_limit(16, 0.8, 6, 6, slack=Slack(6, short=True), now=1.0) == 0
    assert fresh.ceiling.rows is None
