"""Batch-at-a-time over ``Engine.synthesize_batch``: how ttsq batched before its own decoder.

One ``Chat.infer`` call takes one speaker and one set of sampling parameters (the refine prompt's levels among them),
and either speaks or only refines, so the reference backend (ChatTTS's own loop) can only batch requests that agree on
them (:func:`batch_key` of :attr:`SynthesisRequest.grouping`); a
call runs until its longest row ends, and a request's audio depends on who shared its call. This
batcher keeps those semantics behind the :class:`~ttsq.inference.base.Batcher` interface, so the
worker drives every backend the same way: each :meth:`GroupedBatcher.step` takes the oldest
queued request and every compatible one behind it (up to the slot limit) into one call.

A failed call is split the way the worker always split it: out of memory halves the batch limit
for a while; any other error re-runs each request of the call alone, so only the guilty one fails.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ttsq.domain.batching import AdaptiveBatchLimit, batch_key
from ttsq.inference.base import (
    BatcherStats,
    BatchEvent,
    ChunkReady,
    Engine,
    InferenceError,
    OutOfMemory,
    RequestFailed,
    StepHook,
    SynthesisRequest,
    TransientError,
)

__all__ = ["GroupedBatcher"]

log = logging.getLogger(__name__)


@dataclass
class _Queued:
    key: str
    request: SynthesisRequest
    alone: bool


class GroupedBatcher:
    """A :class:`~ttsq.inference.base.Batcher` that runs one compatible group per step."""

    def __init__(self, engine: Engine, slots: int, *, oom_recover_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.hook: StepHook | None = None
        self.keep_ahead: float | None = None  # whole calls: no pieces of its own
        self.stats = BatcherStats()
        self.clock = clock
        self._slots = slots
        self._limit = AdaptiveBatchLimit(slots, oom_recover_s)
        self._queue: deque[_Queued] = deque()
        self._group: list[str] = []

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_limit(self) -> int:
        return self._limit.current(self.clock())

    @property
    def waiting_rows(self) -> int:
        return len(self._queue)

    @property
    def active_rows(self) -> int:
        return len(self._group)

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    def add(self, key: str, request: SynthesisRequest, *, alone: bool = False) -> list[BatchEvent]:
        self._queue.append(_Queued(key, request, alone))
        return []

    def prepared(self, request: SynthesisRequest) -> SynthesisRequest:
        """As it is: ChatTTS's own call normalises and splits the text itself (this is its reference loop)."""
        return request

    def requests(self) -> list[str]:
        return [*self._group, *(item.key for item in self._queue)]

    def cancel(self, key: str) -> None:
        self._queue = deque(item for item in self._queue if item.key != key)

    def step(self) -> list[BatchEvent]:
        group = self._take_group()
        if not group:
            return []
        self._group = [item.key for item in group]
        try:
            return self._run(group)
        finally:
            self._group = []

    def _take_group(self) -> list[_Queued]:
        if not self._queue:
            return []
        first = self._queue.popleft()
        group = [first]
        if first.alone:
            return group
        key = batch_key(first.request, first.request.grouping)
        limit = self.slot_limit
        rest: deque[_Queued] = deque()
        while self._queue:
            item = self._queue.popleft()
            if len(group) < limit and not item.alone and batch_key(item.request, item.request.grouping) == key:
                group.append(item)
            else:
                rest.append(item)
        self._queue = rest
        return group

    def _run(self, group: list[_Queued]) -> list[BatchEvent]:
        requests = [item.request for item in group]
        try:
            if self.hook is not None:
                self.hook(requests)
            chunks = list(self.engine.synthesize_batch(requests))
        except Exception as exc:  # noqa: BLE001 - split below so that only the guilty request fails
            return self._failed(group, exc)
        self.stats.steps += 1
        self.stats.row_steps += len(group)
        self.stats.slot_steps += len(group)
        self.stats.rows_admitted += len(group)
        self.stats.rows_finished += len(group)
        return [ChunkReady(group[owner].key, chunk) for owner, chunk in chunks]

    def _failed(self, group: list[_Queued], exc: BaseException) -> list[BatchEvent]:
        error = exc if isinstance(exc, InferenceError) else TransientError(f"{type(exc).__name__}: {exc}")
        if len(group) == 1:
            return [RequestFailed(group[0].key, error)]
        if isinstance(error, OutOfMemory):
            self.stats.out_of_memory += 1
            size = self._limit.shrink(len(group), self.clock())
            log.warning("out of memory on a batch of %d: batches capped at %d for now", len(group), size)
            self._queue.extendleft(reversed(group))
        else:
            log.warning("a batch of %d failed (%s); running each request alone", len(group), error)
            self.stats.suspects += len(group)
            self._queue.extendleft(_Queued(item.key, item.request, alone=True) for item in reversed(group))
        return []
