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

The fitted cost is a model, and a model lags what the cores actually give the worker when other processes (the API,
Redis, the listeners' clients, anything else on the machine) take them. So the loop is also closed on what the
listeners get (``STREAM_ADMISSION_SLACK``, on by default): the worker keeps a playback account per job it runs
(:class:`ttsq.inference.playback.Listener`, the one its ``ttsq_stream_underruns_total`` counts from), and at every claim
decision :func:`slack_of` reads them all. While any stream that has started playing is short — under its margin
(``PLAYBACK_MARGIN_S``) — the stream room is 0 whatever the fit says: no new stream starts until every started one has
its margin again, and new ones wait in the queue with their position (``wait``) or are refused with ``Retry-After``
(``refuse``: the heartbeat reports the room of 0). A stream is short when

* the audio it has left now is under the margin (read at the decision, not at its next delivery: a stream whose next
  piece is late is seen before it runs dry; in its first :data:`START_PIECES` pieces, which come unevenly, only once
  it has none left), or
* it is losing ground: the buffer its latest delivery left it is less than the one its first left it (its audio has
  come slower than it plays, :meth:`~ttsq.inference.playback.Listener.losing`), however much it still has; or it has
  had its first piece only, so that nothing shows yet whether it keeps ahead.

The second rule is the predictive one: a stream losing ground holds new streams back while it still has audio to spare,
not only once it is down to its margin. A shortage also teaches the worker a ceiling on its rows (:class:`SlackCeiling`):
the streams that queued meanwhile do not all start the moment it recovers.

A stream tells nothing until it plays (its first piece is some tens of steps after its claim), and a fit of the first
few steps, all at one or two rows, says little about many: a burst of sessions on an idle worker would all be claimed
before the first of them was heard. So growth waits for evidence, as a slow start: no more streams may be starting
(claimed, not playing yet) than half those playing and well, one at least — one on an idle worker, then one more once
it is heard keeping ahead, and so on, the rows growing by half each round. The fit and the ceiling still bound it.

"Stream admission" is a stream starting on a worker at all; a row entering one of the decoder's slots at a step
boundary (the scheduler's admission, :mod:`ttsq.inference.sched.scheduler`) is another matter, of rows already claimed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ttsq.inference.playback import Listener, StepCost
from ttsq.runtime.health import HeartbeatRecord

__all__ = ["CEILING_HOLD_S", "START_PIECES", "Slack", "SlackCeiling", "StreamAdmission", "slack_of", "stream_room"]


def stream_room(capacity_rows: int | None, rows_in_hand: int, jobs_in_hand: int) -> int:
    """How many more streams may start now: rows are what a step costs, and a new stream brings at least one.

    ``capacity_rows`` is :meth:`StepCost.real_time_rows <ttsq.inference.playback.StepCost.real_time_rows>` (None: no
    step measured yet). With nothing in hand one stream may always start (a worker never idles for want of a
    measurement, and its steps are what teach the model); before any step, only that one.

    Every job in hand brings at least one row, whether or not the engine has counted it yet (a job claimed a moment
    ago is still on its way into the inference thread, and the engine's rows do not show it until its next step), so
    the rows in hand are never taken as fewer than the jobs: a fit that holds fewer rows than that leaves no room."""
    if jobs_in_hand == 0:
        return max(1, capacity_rows or 0)
    if capacity_rows is None:
        return 0
    return max(0, capacity_rows - max(rows_in_hand, jobs_in_hand))


@dataclass(frozen=True)
class Slack:
    """What the listeners of the streams in hand say at one claim decision (:func:`slack_of`)."""

    playing: int
    """Streams in hand that have started playing."""
    short: bool
    """Whether any of them is short of its margin (the module docstring)."""
    losing: bool = False
    """Whether any of them is losing ground (:meth:`~ttsq.inference.playback.Listener.losing`): what sets the
    :class:`SlackCeiling` (a stream under its margin in the first pieces of its start is no sign of too many rows)."""


def slack_of(listeners: Iterable[Listener], now: float, margin_s: float) -> Slack:
    """The streams playing among ``listeners`` at ``now``, and whether any is short: its audio left is under
    ``margin_s``, or it is losing ground (the module docstring)."""
    playing, short, losing = 0, False, False
    for listener in listeners:
        left = listener.left(now)
        if left is None:
            continue  # not playing yet: the fitted cost and the slow start speak for it
        playing += 1
        losing = losing or listener.losing()
        started = listener.deliveries >= START_PIECES
        unproven = listener.deliveries < 2  # its first piece only: nothing shows yet that it keeps ahead
        short = short or losing or unproven or left < (margin_s if started else 0.0)
    return Slack(playing, short, losing)


START_PIECES = 3
"""Deliveries a stream has had before its audio left is held to the margin. A chunk's first pieces come unevenly (its
lead after ``PIECE_TOKENS + PIECE_LOOKAHEAD`` steps, the rest of its first run, then whole runs: docs/decoder.md), and
between them a new stream is under a margin of half a second by the pieces' arithmetic alone, at any step time the
engine's bound on a stream's start allows; until then it is short only once it has run dry or is losing ground."""
CEILING_HOLD_S = 2.0
"""How long the rows in hand must stay clear of any shortage before :class:`SlackCeiling` lets one more in: long enough
for a stream started at the ceiling to reach its first audio and two more deliveries (its slack's direction)."""


@dataclass
class SlackCeiling:
    """The rows the listeners say the worker keeps real-time, where that is fewer than the fit says.

    A stream losing ground with ``r`` rows in hand shows that ``r`` rows were more than the cores kept ahead of
    playback, whatever the fit says: from its onset, the rows are held under ``r`` (the ceiling, ``r − 1``, at least
    1). Without it, the streams that queued up while one was short would all start the moment it recovered, and take
    the worker straight back over. The ceiling rises by one row each :data:`CEILING_HOLD_S` without a shortage, until the fit is the
    tighter again: a contention that has passed gives its rows back one at a time."""

    rows: int | None = None
    """None: no shortage seen yet, the fit alone decides."""
    short: bool = False
    """Whether the last decision saw a shortage (a shortage's onset sets the ceiling; its lasting does not lower it
    further while the streams recover)."""
    since: float = 0.0
    """When the ceiling last moved, or the last shortage ended."""

    def limit(self, short: bool, rows_in_hand: int, now: float) -> int | None:
        """The ceiling at ``now`` (None: none), given whether a stream is short with ``rows_in_hand`` rows."""
        if short and not self.short:
            self.rows = max(1, rows_in_hand - 1) if self.rows is None else max(1, min(self.rows, rows_in_hand - 1))
        if short or self.short:
            self.since = now
        elif self.rows is not None and now - self.since >= CEILING_HOLD_S:
            self.rows += 1
            self.since = now
        self.short = short
        return self.rows


@dataclass(frozen=True)
class StreamAdmission:
    """One worker's stream admission: its setting, the step cost it measures (the worker's own :class:`StepCost`, fed
    at every step) and the heartbeat record its stream room goes into."""

    mode: Literal["off", "wait", "refuse"]
    """``STREAM_ADMISSION``: ``off`` leaves the claims to the batch's room and reports no stream room; ``wait`` and
    ``refuse`` both hold the claims to it and report it (what the API does with the figure is its own setting's)."""
    step_cost: StepCost
    record: HeartbeatRecord
    ceiling: SlackCeiling = field(default_factory=SlackCeiling)
    """The rows held under where a shortage was seen (:class:`SlackCeiling`)."""

    def claim_limit(
        self,
        room: int,
        target: float,
        rows_in_hand: int,
        jobs_in_hand: int,
        *,
        slack: Slack | None = None,
        now: float = 0.0,
        streams_in_hand: int | None = None,
    ) -> int:
        """How many of the ``room`` jobs the batch has room for to claim now: all of them with stream admission off;
        else no more than the stream room (:func:`stream_room` at the rows a step keeps within ``target`` of a token's
        audio), which goes into the heartbeat record for the API. ``rows_in_hand``: decoding and waiting for a slot.

        With the listeners' ``slack`` at ``now`` (None: the fit alone, ``STREAM_ADMISSION_SLACK=false``): the room is 0
        while a started stream is short, else within the :class:`SlackCeiling`; and the claims start no more streams
        at once than half those playing (the slow start, module docstring: it paces the claims, the room reported is the
        room's). ``streams_in_hand``: the jobs in hand somebody hears as they are made (None: all of them); a job
        nobody listens to never plays, so only these count as streams still starting."""
        if self.mode == "off":
            return room
        capacity = self.step_cost.real_time_rows(target)
        if slack is None:
            streams = stream_room(capacity, rows_in_hand, jobs_in_hand)
            self.record.stream_room = streams
            return min(room, streams)
        ceiling = self.ceiling.limit(slack.losing, max(rows_in_hand, jobs_in_hand), now)
        if ceiling is not None and capacity is not None:
            capacity = min(capacity, ceiling)
        streams = 0 if slack.short else stream_room(capacity, rows_in_hand, jobs_in_hand)
        # The heartbeat reports the room (the API's refuse); the slow start only paces the claims into it.
        self.record.stream_room = streams
        starting = (jobs_in_hand if streams_in_hand is None else streams_in_hand) - slack.playing  # claimed, not heard yet
        return max(0, min(room, streams, max(1, slack.playing // 2) - starting))
