"""Fault injection around a real engine, for failure and chaos tests of the worker (test use only).

The failure tests run the genuine ChatTTS path (on the tiny checkpoint) and make chosen
requests misbehave the way production inference does: hang, raise, run out of GPU memory, or
take the whole process down ("crash": a segfaulting CUDA kernel or the kernel's OOM killer, which
no ``except`` can catch; the chaos suite uses it to prove such a job is dead-lettered, not retried
forever, and that its batch-mates survive it).
Nothing is faked except the failure itself, so retries, timeouts, dead-lettering and memory
release are exercised against real model state. The worker turns this on only when the
``FAULT_MODE`` test setting is set, and says so loudly in its log.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from ttsq.inference.base import Batcher, ChunkAudio, Engine, EngineWrapper, OutOfMemory, SynthesisRequest, TransientError

__all__ = ["FaultConfig", "FaultInjectingEngine", "FaultMode"]

log = logging.getLogger(__name__)

FaultMode = Literal["none", "hang", "raise", "oom", "crash"]


@dataclass(frozen=True)
class FaultConfig:
    mode: FaultMode
    match: str
    """Only requests whose text contains this substring fault; "" makes every request fault."""
    oom_above_batch: int
    """With "oom": only batches of more than this many requests run out of memory (0 = every call),
    the way a real GPU fails on a batch too large for it but not on its halves."""
    hang_s: float
    """How long a "hang" lasts unless :meth:`FaultInjectingEngine.release` ends it first."""


class FaultInjectingEngine(EngineWrapper):
    """Delegates to a real engine, except that matching batches fail as configured.

    Loading and warm-up are never faulted, so a faulty worker still starts and reports healthy
    until it meets a matching job. A "hang" that ends (released or timed out) then completes the
    request normally, like a stalled GPU that recovers.
    """

    def __init__(self, inner: Engine, config: FaultConfig) -> None:
        if config.mode not in get_args(FaultMode):
            raise ValueError(f"unknown fault mode {config.mode!r}")
        super().__init__(inner)
        self.config = config
        self._released = threading.Event()
        self._hung: set[SynthesisRequest] = set()

    def release(self) -> None:
        """End every current and future "hang" at once, so tests can finish a blocked inference."""
        self._released.set()

    def _inject(self, reqs: Sequence[SynthesisRequest]) -> None:
        matching = [req for req in reqs if self.config.match in req.text]
        if self.config.mode == "none" or not matching:
            return
        if self.config.mode == "hang":
            # Once per request: a decode-step batcher calls this at every step, a grouped one once per call.
            fresh = [req for req in matching if req not in self._hung]
            if fresh:
                self._hung.update(fresh)
                self._released.wait(self.config.hang_s)
        elif self.config.mode == "raise":
            raise TransientError("injected fault")
        elif self.config.mode == "oom" and len(reqs) > self.config.oom_above_batch:
            raise OutOfMemory(f"CUDA out of memory (injected, batch of {len(reqs)})")
        elif self.config.mode == "crash":
            # SIGKILL, not an exception or sys.exit: nothing in the worker may run after it (no
            # ``finally``, no failure record), exactly as when a real crash takes the process down.
            log.error("FAULT INJECTION: crashing this process (SIGKILL) on a matching batch of %d", len(reqs))
            os.kill(os.getpid(), signal.SIGKILL)

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        self._inject(reqs)
        return self.inner.synthesize_batch(reqs)

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        """The inner engine's batcher, faulting inside its steps: a grouped call, a decode step or a
        row's admission with a matching request fails the way the batcher's own failures do."""
        batcher = self.inner.batcher(slots, oom_recover_s=oom_recover_s)
        batcher.hook = self._inject
        return batcher
