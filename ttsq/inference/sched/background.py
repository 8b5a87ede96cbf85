"""One background thread whose queue is ordered by rank, not by arrival.

The decoder's prefill and audio threads (``OVERLAP_PREFILL_AND_AUDIO``) serve rows of many requests.
In arrival order a short request's only row waits behind every later chunk of the long requests
that were queued before it — its prefill behind their prefills, its audio behind their audio — so
it finishes several times later than alone. Ranked by the scheduler's row priority (first chunks
first, then arrival), the newcomer's work runs next. The standard library's executors are FIFO only.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class RankedExecutor:
    """A single worker thread that runs the waiting call of the lowest rank next (ties: first submitted).

    A call already running is never interrupted: ranking decides only what starts next.
    """

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[Any, int, Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, rank: Any, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)`` at ``rank`` (any comparable value; lower runs first)."""
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("this executor is shut down")
            heapq.heappush(self._heap, (rank, next(self._order), future, fn, args))
            self._ready.notify()
        return future

    def cpu_s(self) -> float:
        """CPU seconds its thread has used so far (its own clock: what it takes of the cores, waits not counted; 0
        where the platform has no per-thread clock). The worker counts it in its decode steps' cost."""
        ident = self._thread.ident
        if ident is not None:
            with contextlib.suppress(AttributeError, OSError):  # no such clock here; the thread has ended
                self._cpu_s = time.clock_gettime(time.pthread_getcpuclockid(ident))
        return self._cpu_s

    def shutdown(self) -> None:
        """Run what is queued, then stop the thread."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._heap and not self._closed:
                    self._ready.wait()
                if not self._heap:
                    return
                _, _, future, fn, args = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(result)
