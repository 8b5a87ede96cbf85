"""Cross-request micro-batching: which jobs may share one ChatTTS call, and how big a batch may be.

One ChatTTS call takes one speaker embedding and one set of sampling parameters, so only requests
that agree on those (and on language and speed) share a call of the reference engine (:func:`batch_key`).
On CUDA out-of-memory the batch is halved and the engine remembers the smaller size for a while (an
adaptive limit), rather than failing jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ttsq.domain.sampling import Sampling
from ttsq.domain.text import detect_language


class Batchable(Protocol):
    """What a job's parameters and an engine request have in common."""

    @property
    def text(self) -> str: ...
    @property
    def sampling(self) -> Sampling: ...


def batch_key(item: Batchable, speaker: object) -> tuple[object, ...]:
    """What requests must share to run in one ChatTTS call: everything but the text and the seed.

    ``speaker`` is whatever identifies the voice on the caller's side: a job's speaker identity
    (seed, embedding or prompt hash) when grouping claimed jobs, the request's whole voice in the engine
    (embedding, speaker prompt and its text). Every
    sampling parameter is in the key (the whole record), and the language, which ChatTTS takes per call.
    """
    return (speaker, item.sampling, detect_language(item.text))


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

    def hold(self, size: int, now: float | None = None) -> int:
        """Allow at most ``size`` for a while (what is running fits; one more did not)."""
        moment = time.monotonic() if now is None else now
        self._limit = max(1, min(self._limit, size))
        self._until = moment + self.recover_after_s
        return self._limit

    def shrink(self, failed_size: int, now: float | None = None) -> int:
        """A batch of ``failed_size`` ran out of memory: allow at most half of it for a while."""
        moment = time.monotonic() if now is None else now
        self._limit = max(1, min(self._limit, failed_size // 2))
        self._until = moment + self.recover_after_s
        return self._limit


# ---- sizing the batch to the device -------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One measured engine call: ``batch`` requests of ``tokens`` audio tokens each, at the longest chunk of text."""

    batch: int
    tokens: int
    peak_bytes: int
    """The device's peak allocated memory during the call (weights included)."""
    seconds: float
    audio_s: float
    """Seconds of audio one request produced."""

    @property
    def step_s(self) -> float:
        return self.seconds / self.tokens

    @property
    def audio_s_per_token(self) -> float:
        return self.audio_s / self.tokens


@dataclass(frozen=True)
class BatchPlan:
    limit: int
    by_memory: int
    by_speed: int
    reason: str


def plan_batch_limit(
    small: Probe,
    large: Probe,
    longer: Probe,
    *,
    usable_bytes: int,
    max_tokens: int,
    rtf_target: float,
    cap: int,
) -> BatchPlan:
    """The largest batch that fits the device's memory and keeps every stream ahead of playback.

    Memory: three probes at the longest chunk — ``small`` and ``large`` differ in batch size,
    ``longer`` repeats ``large`` with more tokens — give the fixed cost (weights, buffers), the
    cost per request, and how that grows per generated token; a request's worst case is at
    ``max_tokens``. ``usable_bytes`` is what the process may use (its allocations now plus the
    free memory, less a headroom the caller keeps). Speed: a decode step gets slower as the batch
    grows; every stream in a batch advances one step at a time, so its real-time factor is the
    step time over the audio one step produces, and it must stay under ``rtf_target``. The OOM
    split remains the safety net for whatever these straight lines miss.
    """
    per_request = max(1.0, (large.peak_bytes - small.peak_bytes) / (large.batch - small.batch))
    per_request_token = max(0.0, (longer.peak_bytes - large.peak_bytes) / (large.batch * (longer.tokens - large.tokens)))
    fixed = small.peak_bytes - small.batch * per_request
    worst_request = per_request + per_request_token * max(0, max_tokens - large.tokens)
    by_memory = max(1, int((usable_bytes - fixed) // worst_request))

    step_per_request = max(0.0, (large.step_s - small.step_s) / (large.batch - small.batch))
    audio_per_step = small.audio_s_per_token
    by_speed = cap
    if audio_per_step > 0 and step_per_request > 0:
        by_speed = max(1, int(small.batch + (rtf_target * audio_per_step - small.step_s) / step_per_request))
    elif audio_per_step > 0 and small.step_s / audio_per_step > rtf_target:
        by_speed = 1
    limit = max(1, min(cap, by_memory, by_speed))
    binding = "memory" if limit == by_memory else "stream speed" if limit == by_speed else "MAX_BATCH"
    return BatchPlan(
        limit=limit,
        by_memory=by_memory,
        by_speed=by_speed,
        reason=f"{binding} (memory allows {by_memory}, a real-time factor under {rtf_target} allows {by_speed}, cap {cap})",
    )


def bucket_sizes(limit: int) -> tuple[int, ...]:
    """Batch sizes a compiled model is prepared for: powers of two up to ``limit``, and ``limit`` itself."""
    sizes = {1 << n for n in range(limit.bit_length()) if 1 << n <= limit}
    return tuple(sorted(sizes | {limit}))


def bucket_for(size: int, buckets: Sequence[int]) -> int:
    """The smallest prepared batch size that holds ``size`` rows (the rest are padding)."""
    for bucket in buckets:
        if bucket >= size:
            return bucket
    raise ValueError(f"no bucket holds {size} rows; the largest is {buckets[-1]}")


class MemoryHygiene:
    """When returning cached device memory pays: after an out-of-memory error, when the allocator has
    reserved more than ``reserved_fraction`` of the device, or once the worker has been idle for
    ``idle_s`` — never after every batch (a ``gc.collect()`` + ``empty_cache()`` cost ~7% of a batch,
    measured on an H200)."""

    def __init__(self, reserved_fraction: float, idle_s: float) -> None:
        self.reserved_fraction = reserved_fraction
        self.idle_s = idle_s
        self._released_since_last_batch = True

    def after_batch(self, reserved: int | None, total: int | None, failed_for_memory: bool) -> bool:
        """Whether to release now; ``reserved``/``total`` are None on a CPU (nothing to release)."""
        if reserved is None or total is None:
            self._released_since_last_batch = True
            return False
        release = failed_for_memory or reserved > self.reserved_fraction * total
        self._released_since_last_batch = release
        return release

    def when_idle(self, idle_for_s: float) -> bool:
        """Once per idle period: release what the last batches left cached."""
        if self._released_since_last_batch or idle_for_s < self.idle_s:
            return False
        self._released_since_last_batch = True
        return True
