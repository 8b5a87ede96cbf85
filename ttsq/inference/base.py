"""The engine contract: what the worker asks of a text-to-speech model, and how a model fails.

An engine turns batches of :class:`SynthesisRequest` into chunks of 24 kHz float32 audio. It
knows nothing of queues or HTTP. :class:`EngineWrapper` delegates every call, so a wrapper
(fault injection, a test spy) overrides only what it changes.

Failures are typed, so that the worker decides retries from the type and never has to import
torch to recognise an out-of-memory error:

* :class:`PermanentError` — the request itself is unusable (empty after normalization, a bad
  speed): retrying cannot help, the job fails at once.
* :class:`TransientError` — the model failed this time; the job is retried with backoff.
* :class:`OutOfMemory` — a transient failure that also tells the worker to split the batch.

Any other exception escaping an engine is treated as transient.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import join_chunks
from ttsq.domain.batching import Probe

__all__ = [
    "ChunkAudio",
    "DeviceMemory",
    "Engine",
    "EngineStats",
    "EngineWrapper",
    "InferenceError",
    "ModelInfo",
    "ModelLoadError",
    "OutOfMemory",
    "PermanentError",
    "SynthesisRequest",
    "TransientError",
    "synthesize",
]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    source: Literal["hub", "directory"]
    speaks_noise: bool
    """True for random-weight checkpoints: the pipeline is real, the audio is noise."""
    device: str


@dataclass(frozen=True)
class SynthesisRequest:
    text: str
    speaker: str
    """A ChatTTS speaker-embedding string (:meth:`Engine.speaker_from_seed` or a stored voice)."""
    seed: int
    """Sampling seed: the same request and seed give bit-identical audio on the same device."""
    speed: int = 5
    temperature: float = 0.3
    top_p: float = 0.7
    top_k: int = 20
    refine_text: bool = False


@dataclass(frozen=True)
class ChunkAudio:
    """One sentence chunk's raw audio (before joining), as it comes out of the model."""

    index: int
    total: int
    samples: npt.NDArray[np.float32]


@dataclass(frozen=True)
class DeviceMemory:
    """The accelerator's memory as torch's caching allocator sees it, in bytes."""

    allocated: int
    reserved: int
    max_allocated: int
    total: int
    free: int
    """Free on the device now (other processes' use subtracted), per ``torch.cuda.mem_get_info``."""


@dataclass(frozen=True)
class EngineStats:
    memory: DeviceMemory | None
    """None on a CPU."""
    compiled_graphs: int | None
    """Graphs torch.compile has built so far; None when the model is not compiled."""


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message names the source and what is wrong."""


class InferenceError(Exception):
    """Base of the failures an engine reports; ``retryable`` tells the worker what to do."""

    retryable = True


class PermanentError(InferenceError):
    """The request cannot succeed, however often it is tried."""

    retryable = False


class TransientError(InferenceError):
    """This attempt failed; another may succeed."""


class OutOfMemory(TransientError):
    """The device ran out of memory for this batch: a smaller batch may fit."""


class Engine(Protocol):
    """The calls the worker makes, met by the ChatTTS engine and by every wrapper."""

    def load(self) -> ModelInfo:
        """Load the model (blocking); calling it again returns the same info."""
        ...

    def warm_up(self) -> None:
        """Pay one-off costs (JIT, CUDA context) before the first job."""
        ...

    def speaker_from_seed(self, seed: int) -> str:
        """A reproducible speaker embedding for ``seed``."""
        ...

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        """Speak requests that share a speaker and parameters; yield ``(request index, chunk)`` as chunks finish."""
        ...

    def release_memory(self) -> None:
        """Give cached device memory back (after an out-of-memory error, or when idle)."""
        ...

    def stats(self) -> EngineStats:
        """The device's memory and compile statistics now (cheap; called from the event loop for metrics)."""
        ...

    def measure(self, batch: int, tokens: int) -> Probe | None:
        """Time and peak memory of one forced-length call at the longest chunk (None on a CPU: nothing to size)."""
        ...

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        """Pad later calls to these batch sizes and run each once now (torch.compile builds its graphs here)."""
        ...


class EngineWrapper:
    """An engine that delegates every call to ``inner``; subclasses override what they change."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    def load(self) -> ModelInfo:
        return self.inner.load()

    def warm_up(self) -> None:
        self.inner.warm_up()

    def speaker_from_seed(self, seed: int) -> str:
        return self.inner.speaker_from_seed(seed)

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        return self.inner.synthesize_batch(reqs)

    def release_memory(self) -> None:
        self.inner.release_memory()

    def stats(self) -> EngineStats:
        return self.inner.stats()

    def measure(self, batch: int, tokens: int) -> Probe | None:
        return self.inner.measure(batch, tokens)

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        self.inner.prepare(batch_sizes)


def synthesize(engine: Engine, req: SynthesisRequest) -> npt.NDArray[np.float32]:
    """One request's whole audio, its chunks joined the way the worker joins them (for tests and scripts)."""
    samples = join_chunks([chunk.samples for _, chunk in engine.synthesize_batch([req])])
    if samples.size == 0:
        raise TransientError("model produced no audio")
    return samples
