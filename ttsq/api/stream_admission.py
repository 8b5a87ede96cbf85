"""Whether the workers can serve what a caller is about to wait on: any worker at all (``NO_WORKER_S``), and stream
admission's API side, stream room for one more real-time stream (``STREAM_ADMISSION=refuse``).

**No worker.** A stream, a long-poll or a realtime session waits on a job's audio or its end. With no worker alive
nothing will ever come: the caller used to wait in silence for as long as its limits allowed (a realtime session
up to ``REALTIME_MAX_S``). So a waiter on a job that has not ended asks :class:`WorkerWatch` whether any worker has
written a heartbeat within ``NO_WORKER_S``; if none has, it is told :class:`NoWorker` at once — 503 with
``Retry-After`` before an HTTP response starts, an ``error`` event (or an aborted body) after, close 1013 on a
realtime session. The job itself stays queued: a worker that starts later runs it.

The answer is read from Redis at most once per ``NO_WORKER_S / 5`` per process, one read shared by every waiter
that asks meanwhile, so a thousand waiters cost what one does. A read that fails (Redis unreachable) says nothing
about the workers, and neither does the window after it: workers whose beats could not land during an outage get
``NO_WORKER_S`` to beat again before their silence counts.

**No stream room.** Each worker with stream admission on reports in its heartbeat its stream room: how many more
streams it can start and keep ahead of playback (``stream_room``, from its measured decode steps: the worker's side is
:mod:`ttsq.runtime.stream_admission`, which lists the whole chain). A submit while those add up to nothing would wait in
the queue behind streams that fill every worker; with ``refuse`` it is turned away at once instead
(:func:`refuse_without_stream_room`), so a voice agent can fall back or retry, and the streams already started keep
their promise. The figure is as fresh as the last heartbeats (``HEARTBEAT_INTERVAL_S``); with no worker reporting
one, nothing is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from ttsq.api.auth import until_revoked
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import QueueFullError

__all__ = ["NoStreamRoom", "NoWorker", "WorkerWatch", "beating_within", "refuse_without_stream_room"]

T = TypeVar("T")

REFRESHES_PER_WINDOW = 5
"""How many times per ``NO_WORKER_S`` a process reads the live workers again (at most): the answer a waiter gets is
that much younger than the window it judges."""


class NoStreamRoom(QueueFullError):
    """The live workers report no stream room: every one's real-time streams are taken (a 429 with ``Retry-After``,
    like a full queue)."""

    def __init__(self) -> None:
        Exception.__init__(self, "every worker is streaming as many voices as it can keep real-time; try again shortly")
        self.depth = 0


async def refuse_without_stream_room(heartbeats: Heartbeats) -> None:
    """Raise :class:`NoStreamRoom` when the live workers report no stream room (none reporting one: nothing refused)."""
    room = await heartbeats.stream_room()
    if room is not None and room <= 0:
        raise NoStreamRoom


class NoWorker(Exception):
    """No worker has written a heartbeat within ``NO_WORKER_S``: the job a caller waits on will not run for now."""

    code = "no_worker"

    def __init__(self, window_s: float) -> None:
        super().__init__(
            f"no worker is running: none has written a heartbeat for {window_s:g} s (NO_WORKER_S); the job stays "
            "queued and runs once a worker starts; retry later"
        )


def beating_within(heartbeats: Heartbeats, window_s: int) -> Callable[[], Awaitable[int]]:
    """How many workers have written a heartbeat within ``window_s``, by Redis's clock: the pool's heartbeats read with
    ``window_s`` as their TTL (:meth:`Heartbeats.live_count`). The one place :class:`WorkerWatch`'s figure comes from."""
    return Heartbeats(heartbeats.redis, heartbeats.shards, window_s, heartbeats.clock).live_count


class WorkerWatch:
    """Whether any worker is alive, as this process last read it (``count``: workers beating within ``window_s``).

    ``window_s`` 0 turns the watch off: nothing is ever refused (a pool scaled to zero, whose first job waits for a
    worker to start)."""

    def __init__(
        self, count: Callable[[], Awaitable[int]], window_s: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.refresh_s = window_s / REFRESHES_PER_WINDOW
        """How long one read answers every waiter of the process (and how often a quiet waiter asks)."""
        self.last_count: int | None = None
        """The live workers at the last read that reached Redis (None before one did): the API's own view, exported."""
        self._count = count
        self._monotonic = monotonic
        self._answer: int | None = None
        self._read_at = float("-inf")
        self._unreachable_at = float("-inf")
        self._reading: asyncio.Future[int | None] | None = None

    @property
    def on(self) -> bool:
        return self.window_s > 0

    async def live(self) -> int | None:
        """The workers beating within the window, read again when the last read is older than :attr:`refresh_s`
        (one read for every caller that asks meanwhile); None when Redis could not be asked."""
        if self._monotonic() - self._read_at < self.refresh_s:
            return self._answer
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
            self._reading.add_done_callback(self._read_done)
        return await asyncio.shield(self._reading)

    def _read_done(self, _: asyncio.Future[int | None]) -> None:
        self._reading = None

    async def _read(self) -> int | None:
        try:
            count: int | None = await self._count()
        except (*STORE_ERRORS, OSError, TimeoutError):
            count = None
            self._unreachable_at = self._monotonic()
        else:
            self.last_count = count
        self._answer, self._read_at = count, self._monotonic()
        return count

    async def require(self) -> None:
        """Raise :class:`NoWorker` when no worker has beaten within the window (and Redis was reachable all along it)."""
        if not self.on:
            return
        if await self.live() == 0 and self._monotonic() - self._unreachable_at >= self.window_s:
            raise NoWorker(self.window_s)

    def watching(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """``source``, which raises :class:`NoWorker` once no worker is alive: asked every :attr:`refresh_s` (from the
        process's shared answer) while the source goes on, whether it yields or waits."""
        if not self.on:
            return source

        async def alive() -> bool:
            await self.require()
            return True

        return until_revoked(source, alive, self.refresh_s)
