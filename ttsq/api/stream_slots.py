"""How many event and audio streams one API process holds open at once: per caller, and in all.

A stream (``GET /v1/tts/events/{id}``, ``GET /v1/tts/stream/{id}``, ``POST /v1/audio/speech``, which
answers with the audio once made) lasts as long as its task: it polls Redis every half second, or holds
one of the process's Redis connections in a blocking read. A thousand opened at once kept the event
loop so busy that ``/healthz`` answered in seconds, and as many blocking reads would take every pooled
connection. So each process serves at most ``MAX_STREAMS`` streams, and one caller (its key, or a
client address without one) at most ``MAX_STREAMS_PER_KEY`` of them: past the caller's share, ``429``,
past the process's, ``503`` (another replica may have room), both with ``Retry-After``.

Counted per process, in memory: what it protects is this process's event loop and connection pool, and
a count that died with its process can never leak. A slot is taken once the caller is authenticated
(``deps.py``) and kept in the request's state; :func:`releasing` hands it back when the whole response
has been sent, or the client went away, whatever the route did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HELD", "StreamSlots", "TooManyStreams", "releasing", "when_over"]

HELD = "ttsq_stream_slots"
"""Where a request keeps its slots' release functions (and whatever else waits for its response to be over), in its state."""


class TooManyStreams(Exception):
    """A stream over the caller's share (``per_key``: 429) or over the process's limit (503)."""

    def __init__(self, message: str, *, per_key: bool) -> None:
        super().__init__(message)
        self.per_key = per_key


class StreamSlots:
    """The streams this process serves, counted per caller; :meth:`take` one, call what it returns to give it back."""

    def __init__(self, max_total: int, max_per_key: int) -> None:
        self.max_total = max_total
        self.max_per_key = max_per_key
        self.by_caller: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return self.by_caller.total()

    def take(self, caller: str) -> Callable[[], None]:
        """A slot for ``caller`` (its subject: ``key:<id>`` or ``addr:<address>``), or :class:`TooManyStreams`."""
        if self.by_caller[caller] >= self.max_per_key:
            raise TooManyStreams(
                f"this caller already has {self.by_caller[caller]} streams open, its limit (MAX_STREAMS_PER_KEY="
                f"{self.max_per_key}); close one, or retry later",
                per_key=True,
            )
        if self.open >= self.max_total:
            raise TooManyStreams(
                f"this API process serves its limit of {self.max_total} streams (MAX_STREAMS); retry later", per_key=False
            )
        self.by_caller[caller] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.by_caller[caller] -= 1
                if self.by_caller[caller] <= 0:
                    del self.by_caller[caller]

        return release


def hold(slots: StreamSlots, caller: str, state: Any) -> None:
    """Take a slot for ``caller`` and keep it in the request's ``state`` until :func:`releasing` gives it back."""
    when_over(state, slots.take(caller))


def when_over(state: Any, callback: Callable[[], None]) -> None:
    """Have :func:`releasing` call ``callback`` once the response to the request whose ``state`` this is is over: sent,
    failed, or abandoned by its client — even one whose body never started."""
    held = getattr(state, HELD, None)
    if held is None:
        held = []
        setattr(state, HELD, held)
    held.append(callback)


def releasing(app: ASGIApp) -> ASGIApp:
    """``app``, giving back every stream slot a request held once its response is over (sent, failed or abandoned)."""

    async def released_after(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            for release in scope.get("state", {}).pop(HELD, []):
                release()

    return released_after
