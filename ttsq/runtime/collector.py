"""The API process's garbage collector: what was built at start frozen, full collections on a timer, not on growth.

Why. CPython's collector runs a full (generation 2) collection whenever the objects that survived the young
collections have grown by a quarter since the last one. An API process into which a thousand listeners arrive at once
grows exactly so: each held stream keeps its coroutines, tasks and request state alive. So during such a storm the
collector walks the whole heap several times, each walk holding the event loop and every request on it. Measured with
``python -m bench.listening.listeners`` (1,000 listeners opened at once on one API process): full collections of 130–180 ms,
and ``/healthz`` p99 in the storm up to 28× its rest (a probe that meets a walk waits it out; the slowest 563 ms); with
this policy 1.0–2.9×, median 1.65× over eight runs, the slowest probe under 19 ms where recorded (BENCHMARKS.md). Most of each walk
was the process's start-up heap — modules, classes, the app, its settings — which lives as long as the process and holds
no garbage.

So, once the app has started (:func:`install`):

1. ``gc.freeze()``: everything built so far moves to the collector's permanent generation and is never walked again;
2. the automatic full collection is switched off (its threshold set out of reach); the young generations are collected
   as before, and that is where almost all cyclic garbage — a request's, a stream's — dies;
3. a full collection runs every ``GC_FULL_COLLECTION_S`` seconds on the event loop (:func:`collect_periodically`), so
   that garbage which did reach the old generation is freed within that period, at a rate that does not depend on the
   traffic: a storm no longer triggers walks, and a walk covers only what requests hold, not the start-up heap.

``GC_FULL_COLLECTION_S=0`` leaves CPython's own policy in place. Only the API does this: a worker's heap is its model
and its loop serves no crowd.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable

__all__ = ["NEVER", "collect_periodically", "install"]

log = logging.getLogger("ttsq.collector")

NEVER = 2**30
"""The full-collection threshold that turns the automatic full collection off: it counts young-generation collections
(one per ~7,000 container allocations by default), so it is never reached."""


_installed = 0
"""Apps in this process that hold the policy (tests build several at once): the first installs it, the last puts back."""
_saved: tuple[int, int, int] = gc.get_threshold()


def install() -> Callable[[], None]:
    """Freeze the start-up heap and switch the automatic full collection off; returns what puts both back once no app
    of the process holds the policy any more (the app's shutdown calls it, so that a process that builds several apps —
    the tests — keeps a working collector). Freezing costs no walk: the start-up heap is moved, not scanned."""
    global _installed, _saved
    if _installed == 0:
        _saved = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(_saved[0], _saved[1], NEVER)
    _installed += 1
    restored = False

    def restore() -> None:
        global _installed
        nonlocal restored
        if restored:
            return
        restored = True
        _installed -= 1
        if _installed == 0:
            gc.set_threshold(*_saved)
            gc.unfreeze()

    return restore


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """True if ``stop`` was set within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def collect_periodically(
    every_s: float,
    stop: asyncio.Event,
    *,
    wait: Callable[[asyncio.Event, float], Awaitable[bool]] = _wait,
    collect: Callable[[int], int] = gc.collect,
    on_collect: Callable[[float], None] | None = None,
) -> None:
    """A full collection every ``every_s`` seconds until ``stop`` is set. ``wait`` (stop, seconds) → stopped, and
    ``collect`` are injectable so that a test runs the schedule without sleeping; ``on_collect`` gets each
    collection's duration in seconds (the API's metric)."""
    while not await wait(stop, every_s):
        started = time.perf_counter()
        freed = collect(2)
        took = time.perf_counter() - started
        if on_collect is not None:
            on_collect(took)
        log.debug("full garbage collection: %d objects freed in %.1f ms", freed, took * 1000)
