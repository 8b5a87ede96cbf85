"""Cross-request micro-batching: which jobs may share one ChatTTS call, and how big a batch may be.

One ChatTTS call takes one speaker embedding and one set of sampling parameters, so only jobs
that agree on those (and on language and speed) are batched together; a worker that claimed a
mix processes one batch per group. On CUDA out-of-memory the batch is halved and the worker
remembers the smaller size for a while (an adaptive limit), rather than failing jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, TypeVar

from ttsq.domain.cache_key import speaker_identity
from ttsq.domain.jobs import Job
from ttsq.domain.text import detect_language

T = TypeVar("T")


class Batchable(Protocol):
    """What a job's parameters and an engine request have in common."""

    @property
    def text(self) -> str: ...
    @property
    def speed(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def top_k(self) -> int: ...
    @property
    def refine_text(self) -> bool: ...


def batch_key(item: Batchable, speaker: str) -> tuple[object, ...]:
    """What requests must share to run in one ChatTTS call: everything but the text and the seed.

    ``speaker`` is whatever identifies the voice on the caller's side: a job's speaker identity
    (seed or embedding hash) when grouping claimed jobs, the embedding itself in the engine.
    """
    return (speaker, item.speed, item.temperature, item.top_p, item.top_k, item.refine_text, detect_language(item.text))


def group_compatible(jobs: Sequence[Job]) -> list[list[Job]]:
    """Split claimed jobs into batches that can share a call, keeping claim order within each."""
    groups: dict[tuple[object, ...], list[Job]] = {}
    for job in jobs:
        groups.setdefault(batch_key(job.params, speaker_identity(job.params)), []).append(job)
    return list(groups.values())


def halves(items: Sequence[T]) -> list[list[T]]:
    middle = (len(items) + 1) // 2
    return [list(items[:middle]), list(items[middle:])]


def slices(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


class AdaptiveBatchLimit:
    """The largest batch currently believed to fit: ``max_batch``, or less for a while after an OOM."""

    def __init__(self, max_batch: int, recover_after_s: float) -> None:
        self.max_batch = max_batch
        self.recover_after_s = recover_after_s
        self._limit = max_batch
        self._until = 0.0

    def current(self, now: float | None = None) -> int:
        moment = time.monotonic() if now is None else now
        if self._limit < self.max_batch and moment >= self._until:
            self._limit = self.max_batch
        return self._limit

    def shrink(self, failed_size: int, now: float | None = None) -> int:
        """A batch of ``failed_size`` ran out of memory: allow at most half of it for a while."""
        moment = time.monotonic() if now is None else now
        self._limit = max(1, min(self._limit, failed_size // 2))
        self._until = moment + self.recover_after_s
        return self._limit
