"""Fault injection around a real engine, for failure and chaos tests of the worker.

The failure tests run the genuine ChatTTS path (on the tiny checkpoint) and make chosen
requests misbehave the way production inference does: hang forever, raise, or run out of GPU
memory. Nothing is faked except the failure itself, so retries, timeouts, dead-lettering and
memory release are exercised against real model state.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ttsq.engine import ChunkAudio, Engine, ModelInfo, SynthesisRequest

__all__ = ["FaultConfig", "FaultInjectingEngine"]

FaultMode = Literal["none", "hang", "raise", "oom"]


@dataclass(frozen=True)
class FaultConfig:
    mode: FaultMode = "none"
    match: str = ""
    """Only requests whose text contains this substring fault; "" makes every request fault."""
    hang_s: float = 3600.0
    """How long a "hang" lasts unless :meth:`FaultInjectingEngine.release` ends it first."""
    oom_above_batch: int = 0
    """With "oom": only batches of more than this many requests run out of memory (0 = every call),
    the way a real GPU fails on a batch too large for it but not on its halves."""


class FaultInjectingEngine:
    """Delegates to a real engine, except that matching :meth:`synthesize` calls fail as configured.

    Loading and warm-up are never faulted, so a faulty worker still starts and reports healthy
    until it meets a matching job. A "hang" that ends (released or timed out) then completes the
    request normally, like a stalled GPU that recovers.
    """

    def __init__(self, engine: Engine, config: FaultConfig) -> None:
        if config.mode not in ("none", "hang", "raise", "oom"):
            raise ValueError(f"unknown fault mode {config.mode!r}")
        self.engine = engine
        self.config = config
        self._released = threading.Event()

    def load(self) -> ModelInfo:
        return self.engine.load()

    def warm_up(self) -> None:
        self.engine.warm_up()

    @property
    def info(self) -> ModelInfo:
        return self.engine.info

    def speaker_from_seed(self, seed: int) -> str:
        return self.engine.speaker_from_seed(seed)

    def release_memory(self) -> None:
        self.engine.release_memory()

    def release(self) -> None:
        """End every current and future "hang" at once, so tests can finish a blocked inference."""
        self._released.set()

    def _inject(self, reqs: Sequence[SynthesisRequest]) -> None:
        if self.config.mode == "none" or not any(self.config.match in req.text for req in reqs):
            return
        if self.config.mode == "hang":
            self._released.wait(self.config.hang_s)
        elif self.config.mode == "raise":
            raise RuntimeError("injected fault")
        elif self.config.mode == "oom" and len(reqs) > self.config.oom_above_batch:
            import torch

            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (injected, batch of {len(reqs)})")

    def synthesize(self, req: SynthesisRequest) -> npt.NDArray[np.float32]:
        self._inject([req])
        return self.engine.synthesize(req)

    def synthesize_chunks(self, req: SynthesisRequest) -> Iterator[ChunkAudio]:
        self._inject([req])
        return self.engine.synthesize_chunks(req)

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        self._inject(reqs)
        return self.engine.synthesize_batch(reqs)
