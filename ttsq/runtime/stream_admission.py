"""Stream admission, the worker's side (``STREAM_ADMISSION``): the stream room this worker has — how many more streams
it can start and keep ahead of their listeners — the claims it allows, and the figure its heartbeat reports.

Why: a decode step advances every row by one token of audio, so the streams a worker already runs stay ahead of
playback only while a step stays under a share of that token's audio (``STREAM_RTF_TARGET``, or the engine's tighter
bound on a stream's start). A worker that claimed up to its batch's room would start streams past that point and make
every one of them run dry; with stream admission on it claims no more than its stream room, and the streams it has
already started keep their promise while new ones wait in the queue with a position.

The whole chain, one module a link:

1. the decode steps' cost, measured: :class:`ttsq.inference.playback.StepCost` (fed by the worker at each step),
   whose :meth:`~ttsq.inference.playback.StepCost.real_time_rows` is how many rows a step keeps real-time;
2. the stream room those rows leave, and the claims it allows: here (:func:`stream_room`,
   :meth:`StreamAdmission.claim_limit`, called by the worker loop's ``Worker._free_room``);
3. reported in the worker's heartbeat record: :attr:`ttsq.runtime.health.HeartbeatRecord.stream_room`;
4. summed over the live workers: :meth:`ttsq.store.heartbeats.Heartbeats.stream_room`;
5. with ``refuse``, a submit while that sum is nothing is a 429 with ``Retry-After``: :mod:`ttsq.api.stream_admission`.

"Stream admission" is a stream starting on a worker at all; a row entering one of the decoder's slots at a step
boundary (the scheduler's admission, :mod:`ttsq.inference.sched.scheduler`) is another matter, of rows already claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ttsq.inference.playback import StepCost
from ttsq.runtime.health import HeartbeatRecord

__all__ = ["StreamAdmission", "stream_room"]


def stream_room(capacity_rows: int | None, rows_in_hand: int, jobs_in_hand: int) -> int:
    """How many more streams may start now: rows are what a step costs, and a new stream brings at least one.

    ``capacity_rows`` is :meth:`StepCost.real_time_rows <ttsq.inference.playback.StepCost.real_time_rows>` (None: no
    step measured yet). With nothing in hand one stream may always start (a worker never idles for want of a
    measurement, and its steps are what teach the model); before any step, only that one."""
    if jobs_in_hand == 0:
        return max(1, capacity_rows or 0)
    if capacity_rows is None:
        return 0
    return max(0, capacity_rows - rows_in_hand)


@dataclass(frozen=True)
class StreamAdmission:
    """One worker's stream admission: its setting, the step cost it measures (the worker's own :class:`StepCost`, fed
    at every step) and the heartbeat record its stream room goes into."""

    mode: Literal["off", "wait", "refuse"]
    """``STREAM_ADMISSION``: ``off`` leaves the claims to the batch's room and reports no stream room; ``wait`` and
    ``refuse`` both hold the claims to it and report it (what the API does with the figure is its own setting's)."""
    step_cost: StepCost
    record: HeartbeatRecord

    def claim_limit(self, room: int, target: float, rows_in_hand: int, jobs_in_hand: int) -> int:
        """How many of the ``room`` jobs the batch has room for to claim now: all of them with stream admission off;
        else no more than the stream room (:func:`stream_room` at the rows a step keeps within ``target`` of a token's
        audio), which goes into the heartbeat record for the API. ``rows_in_hand``: decoding and waiting for a slot."""
        if self.mode == "off":
            return room
        streams = stream_room(self.step_cost.real_time_rows(target), rows_in_hand, jobs_in_hand)
        self.record.stream_room = streams
        return min(room, streams)
