"""Benchmark stand-in engines that return silence: the base class and the no-op engine.

The queue-overhead benchmark needs an engine that costs nothing, so that what it measures is the
queue and the worker loop (claim, lease, store, stream) and not inference. :class:`NoopEngine` —
labelled "no-op engine (benchmark stand-in)" wherever it appears — returns a short silent array
instantly. :class:`SilentEngine` is the plumbing it shares with the fixed-cost model of GPU time
in :mod:`bench.fixed_cost_engine`. Neither is ChatTTS, and neither ever speaks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.batching import Probe
from ttsq.inference.base import Batcher, ChunkAudio, EngineStats, ModelInfo, SynthesisRequest
from ttsq.inference.sched.grouped import GroupedBatcher

NOOP_LABEL = "no-op engine (benchmark stand-in)"


class SilentEngine:
    """Meets :class:`ttsq.inference.base.Engine` without a model: every request gets silence.

    Subclasses decide how long the silence is (:meth:`audio_seconds`) and what a call costs
    (:meth:`spend`). One :meth:`spend` per batch call, as one batched ChatTTS call is one GPU
    launch sequence whatever its size.
    """

    label = "silent engine (benchmark stand-in)"

    def __init__(self) -> None:
        self._info: ModelInfo | None = None

    def load(self) -> ModelInfo:
        self._info = ModelInfo(name=self.label, source="directory", speaks_noise=True, device="none")
        return self._info

    def warm_up(self) -> None:
        """Nothing to warm: there is no model."""

    def speaker_from_seed(self, seed: int) -> str:
        return f"stand-in-speaker-{seed}"

    def speaker_from_audio(self, samples: npt.NDArray[np.float32]) -> str:
        """A stand-in prompt: there is no encoder."""
        return f"stand-in-prompt-{samples.size}"

    def blend_speakers(self, speakers: Sequence[str], weights: Sequence[float]) -> str:
        """A stand-in blend: there is no speaker space."""
        return "+".join(f"{speaker}*{weight:g}" for speaker, weight in zip(speakers, weights, strict=True))

    def audio_seconds(self, req: SynthesisRequest) -> float:
        """How much silence a request gets."""
        return 0.01

    def spend(self, batch_size: int) -> None:
        """What one call costs; free here."""

    def _silence(self, req: SynthesisRequest) -> npt.NDArray[np.float32]:
        return np.zeros(max(1, round(self.audio_seconds(req) * SAMPLE_RATE)), dtype=np.float32)

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        if not reqs:
            return
        self.spend(len(reqs))
        for owner, req in enumerate(reqs):
            yield owner, ChunkAudio(index=0, total=1, samples=self._silence(req))

    def release_memory(self) -> None:
        """Nothing is held."""

    def stats(self) -> EngineStats:
        """No device, nothing compiled."""
        return EngineStats(memory=None, compiled_graphs=None)

    def measure(self, batch: int, tokens: int) -> Probe | None:
        """Nothing to size."""
        return None

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        """Nothing to compile."""

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        """One call per batch, as a batched model call is one launch sequence whatever its size."""
        return GroupedBatcher(self, slots, oom_recover_s=oom_recover_s)


class NoopEngine(SilentEngine):
    """The no-op engine (benchmark stand-in): 10 ms of silence per request, at no cost."""

    label = NOOP_LABEL
