"""Cross-request micro-batching: which jobs may share one ChatTTS call, and how big a batch may be.

One ChatTTS call takes one speaker embedding and one set of sampling parameters, so only jobs
that agree on those (and on language and speed) are batched together; a worker that claimed a
mix processes one batch per group. On CUDA out-of-memory the batch is halved and the worker
remembers the smaller size for a while (an adaptive limit), rather than failing jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TypeVar

from ttsq.cache_key import speaker_identity
from ttsq.jobs import Job, TTSParams
from ttsq.text import detect_language

T = TypeVar("T")


def params_batch_key(params: TTSParams) -> tuple[object, ...]:
    """The job-side twin of :func:`ttsq.engine.batch_key`: speaker identity instead of the embedding."""
    return (
        speaker_identity(params),
        params.speed,
        params.temperature,
        params.top_p,
        params.top_k,
        params.refine_text,
        detect_language(params.text),
    )


def group_compatible(jobs: Sequence[Job]) -> list[list[Job]]:
    """Split claimed jobs into batches that can share a call, keeping claim order within each."""
    groups: dict[tuple[object, ...], list[Job]] = {}
    for job in jobs:
        groups.setdefault(params_batch_key(job.params), []).append(job)
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
