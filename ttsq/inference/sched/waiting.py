"""The rows waiting for a slot, in the order they take one: the waiting-queue policy, apart from the scheduler that
pops it (as vLLM keeps its ``request_queue.py``).

The order is :meth:`~ttsq.inference.sched.requests.RowState.priority`: by when a row's audio is due where the
scheduler is playback-aware (re-ranked at every step, as the listeners' buffers change), then first chunks first, then
arrival; ties go in the order the rows came.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ttsq.inference.sched.requests import RowState

__all__ = ["Waiting", "WaitingRows"]


@dataclass(order=True)
class Waiting:
    """One waiting row, ranked."""

    priority: tuple[float, int, int, int, int]
    order: int
    row: RowState = field(compare=False)


class WaitingRows:
    """A heap of :class:`Waiting` rows: pushed, popped lowest first, set aside and put back as they were."""

    def __init__(self) -> None:
        self._heap: list[Waiting] = []
        self._orders = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Waiting]:
        """Every waiting row, in no particular order."""
        return iter(self._heap)

    def push(self, row: RowState) -> None:
        """``row`` waits for a slot (again: out of one, it has none)."""
        row.slot = None
        heapq.heappush(self._heap, Waiting(row.priority(), next(self._orders), row))

    def pop(self) -> Waiting:
        return heapq.heappop(self._heap)

    def restore(self, entry: Waiting) -> None:
        """Put back a row popped and set aside in an admission pass, at its place."""
        heapq.heappush(self._heap, entry)

    def first(self, count: int) -> list[Waiting]:
        """The ``count`` rows that come first, in order (they stay waiting)."""
        return heapq.nsmallest(count, self._heap)

    def rerank(self) -> None:
        """Rank every row afresh (a playback-aware order moves as listeners hear more)."""
        self._heap = [Waiting(entry.row.priority(), entry.order, entry.row) for entry in self._heap]
        heapq.heapify(self._heap)

    def drop(self, key: str) -> None:
        """Forget the rows of request ``key``."""
        kept = [entry for entry in self._heap if entry.row.request.key != key]
        if len(kept) != len(self._heap):
            self._heap = kept
            heapq.heapify(self._heap)

    def prefills(self) -> list[Future[Any]]:
        """The prefills started ahead for waiting rows (what a step with nothing to decode may wait on)."""
        return [entry.row.prefill for entry in self._heap if entry.row.prefill is not None]
