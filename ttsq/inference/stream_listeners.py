"""One listener per stream across its jobs: a realtime session's context is one stream heard from its first audio to its
last, though each of its chunks is a job of its own.

A chunk after a stream's first (:attr:`StreamCue.continues`) continues a listener already playing: its audio is due when
that listener runs out, and a gap between two chunks is an underrun of that listener, not the start of a new one. So
the scheduler (the order of rows: :class:`ttsq.inference.sched.requests.RequestState`) and the worker (its
``ttsq_stream_underruns_total`` and ``ttsq_stream_slack_seconds``) each keep a :class:`StreamListeners`: the
:class:`~ttsq.inference.playback.Listener` of every stream they have heard lately, keyed by the stream's id, so the jobs
of one stream play into one account.

A stream this process has not heard (its earlier chunks ran on another worker, or this one restarted) starts from what
the API said when the chunk was queued (:attr:`StreamCue.left_s`). That figure is a floor: the API counts the audio
it had sent then, and the chunk before was usually still streaming. As a due time a floor errs early, which is safe
(the chunk goes ahead of work due later); as an account of underruns it would count gaps nobody heard, so the worker's
metrics start such a stream afresh instead (``seed=False``: its first audio here counts no slack) and count across its
chunks from then on. A stream's audio is counted when handed on, even where a chunk's comes before the chunk before it
has all gone out (two chunks of one stream decoding at once): the total a listener has is right, its order is not kept.

Bounded: a stream not heard of for ``keep_s`` is forgotten, and at most ``most`` are kept (the least recently used go
first). Every clock is the caller's (monotonic seconds), so tests inject theirs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ttsq.inference.playback import Listener

__all__ = ["StreamCue", "StreamListeners"]


@dataclass(frozen=True)
class StreamCue:
    """A job's place in a stream, as the engine sees it (from :class:`ttsq.domain.jobs.StreamPlace`)."""

    id: str
    """The stream's opaque id, the same on every chunk of it."""
    continues: bool
    """It continues a stream already playing (every chunk but the first)."""
    left_s: float
    """Seconds of audio the stream's listener had left when this job was claimed, of what the API had sent when the job
    was queued (negative: it had run dry that long), both times by Redis's clock, so no host's clock enters: the floor
    its due time starts from where the stream was not heard here before (it is taken at :meth:`StreamListeners.listener`,
    a moment after the claim)."""


class StreamListeners:
    """The listeners of the streams heard lately, by stream id (see the module)."""

    def __init__(self, *, seed: bool, keep_s: float = 120.0, most: int = 4096) -> None:
        self.seed = seed
        """A stream not heard before starts from its cue's ``runs_out_at`` (the scheduler's order); else afresh (the
        worker's metrics: no slack is counted before this process has heard the stream)."""
        self.keep_s = keep_s
        self.most = most
        self._streams: OrderedDict[str, tuple[Listener, float]] = OrderedDict()
        """Stream id → its listener and when it was last asked for, least recently first."""

    def __len__(self) -> int:
        return len(self._streams)

    def listener(self, cue: StreamCue, now: float) -> Listener:
        """The listener of ``cue``'s stream at ``now``: the one heard lately, or a new one (seeded from the cue where
        :attr:`seed` says so and the job continues a stream: it runs out ``cue.left_s`` after ``now``). A cue that says
        the listener has more audio than the account here knows of (a chunk between ran on another worker) moves the
        account's end up to it."""
        while self._streams:
            _, (_, used) = next(iter(self._streams.items()))
            if now - used <= self.keep_s:
                break
            self._streams.popitem(last=False)
        kept = self._streams.pop(cue.id, None)
        listener = kept[0] if kept is not None else Listener()
        if cue.continues and self.seed:
            if listener.started_at is None:
                listener.started_at = now
                listener.buffered_until = now + cue.left_s
            else:
                listener.buffered_until = max(listener.buffered_until, now + cue.left_s)
        self._streams[cue.id] = (listener, now)
        while len(self._streams) > self.most:
            self._streams.popitem(last=False)
        return listener
