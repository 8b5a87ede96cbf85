"""SIGTERM or SIGINT to a benchmark driver as an exception, so that it unwinds through every ``finally``.

A benchmark, soak or GPU run starts servers and workers; stopped by a time limit (SIGTERM) or by hand
(SIGINT), it must still write what it measured and leave nothing running. Raising
:class:`Interrupted` from the signal handler turns the signal into an ordinary unwind. Standard
library only: :mod:`bench.gpu` runs on bare GPU machines before anything is installed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: stop, write what was measured, stop what was started."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def on_stop_signals(handler: Handler = _raise) -> dict[int, Handler]:
    """Handle SIGTERM and SIGINT with ``handler`` (by default: raise :class:`Interrupted`); the previous
    handlers come back, for :func:`restore`. ``signal.SIG_IGN`` shields a cleanup from a second signal."""
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def restore(previous: dict[int, Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`Interrupted`; the previous handlers afterwards."""
    previous = on_stop_signals()
    try:
        yield
    finally:
        restore(previous)
