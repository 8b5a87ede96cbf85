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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import join_chunks
from ttsq.domain.batching import Probe
from ttsq.domain.sampling import DEFAULT_SAMPLING, Sampling
from ttsq.inference.stream_listeners import StreamCue

__all__ = [
    "BatchEvent",
    "Batcher",
    "BatcherStats",
    "ChunkAudio",
    "ChunkReady",
    "DeviceMemory",
    "Engine",
    "EngineStats",
    "EngineWrapper",
    "InferenceError",
    "ModelInfo",
    "ModelLoadError",
    "OutOfMemory",
    "PermanentError",
    "PieceReady",
    "RequestFailed",
    "StepHook",
    "SynthesisRequest",
    "TransientError",
    "synthesize",
    "typed",
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
    speaker: str | None
    """A ChatTTS speaker-embedding string (:meth:`Engine.speaker_from_seed` or a stored voice); None for a voice
    that is a speaker prompt alone (a reference voice: ChatTTS then writes ``[empty_spk]``, as upstream does)."""
    seed: int
    """Sampling seed: the same request and seed give bit-identical audio on the same device."""
    sampling: Sampling = DEFAULT_SAMPLING
    """Speed, temperature, top-p, top-k, refinement and its prompt's levels: what requests in one batch share."""
    speaker_prompt: str | None = None
    """ChatTTS's ``spk_smp``: a recording's DVAE codes (:meth:`Engine.speaker_from_audio`), appended to the prompt."""
    prompt_text: str | None = None
    """ChatTTS's ``txt_smp``: what ``speaker_prompt`` says, written before the text."""
    first_chunk: int = 0
    """The index of the text's first chunk in a longer text (a realtime session's later sentences): chunk ``i`` draws
    the random stream of chunk ``first_chunk + i`` (:func:`ttsq.inference.gpt.slot_decoder.stream_seed`)."""
    consistent: bool = False
    """One voice across the text: the first chunk's audio becomes the speaker prompt of the later chunks, with the
    first chunk's text as its ``txt_smp`` (what ChatTTS's ``split_text`` does). No effect with a speaker prompt."""
    refine_only: bool = False
    """ChatTTS's refine pass alone (``refine_text_only``), steered by ``sampling.refine_prompt``: each chunk comes as a
    :class:`ChunkAudio` without samples whose ``text`` is the chunk refined (a refine job's answer); no speaker needed."""
    chunks: tuple[str, ...] | None = None
    """Its text already cut into chunks and normalised (:meth:`Batcher.prepared`, in a thread beside the decode loop);
    None: the batcher does it when the request is added."""
    stream: StreamCue | None = None
    """Its place in a stream heard across jobs (a realtime session's chunk): a continuation is due when that stream's
    listener runs out, not at its arrival (:mod:`ttsq.inference.stream_listeners`)."""
    pieces: bool = True
    """Audio within a chunk as it is generated (:class:`PieceReady` events), for a listener who hears the job as it is
    made; False: each chunk's audio is decoded whole at its end, the cheapest exact way, for a job nobody listens to
    live (docs/decoder.md, "Which chunks are decoded in pieces"). An engine that never pieces ignores it."""

    @property
    def voice(self) -> tuple[str | None, str | None, str | None, bool]:
        """Everything that makes the voice (what a grouped call must share)."""
        return (self.speaker, self.speaker_prompt, self.prompt_text, self.consistent)

    @property
    def grouping(self) -> tuple[object, ...]:
        """What a grouped call must share besides the sampling (:func:`ttsq.domain.batching.batch_key`): the voice, and
        whether the call speaks or only refines."""
        return (self.voice, self.refine_only)


@dataclass(frozen=True)
class ChunkAudio:
    """One sentence chunk's raw audio (before joining), as it comes out of the model."""

    index: int
    total: int
    samples: npt.NDArray[np.float32]
    text: str = ""
    """The chunk's text as the model spoke it (normalised; refined where asked), for its caption; a refine-only
    request's chunk is this text alone (no samples)."""


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


@dataclass(frozen=True)
class ChunkReady:
    """One chunk of a request is synthesised (chunks may end out of order)."""

    key: str
    chunk: ChunkAudio


@dataclass(frozen=True)
class PieceReady:
    """The next samples of a chunk still being generated (audio within a chunk, as it is generated: a *piece*).

    A chunk's pieces come in order, each continuing the last; its :class:`ChunkReady` follows with the whole chunk,
    whose samples begin with exactly the pieces' samples joined (the rest is its tail). Only audible samples, as in
    :class:`ChunkAudio`; ``chunk.samples`` is the piece alone."""

    key: str
    chunk: ChunkAudio


@dataclass(frozen=True)
class RequestFailed:
    """A request failed; none of its remaining chunks will come."""

    key: str
    error: BaseException


BatchEvent = ChunkReady | PieceReady | RequestFailed

StepHook = Callable[[Sequence[SynthesisRequest]], None]
"""Called with the requests of the rows about to run together (one decode step, or one grouped call),
a request once per row; whatever it raises is that step's failure. Fault injection uses it."""


@dataclass
class BatcherStats:
    """How full the batcher's steps ran, since it started."""

    steps: int = 0
    row_steps: int = 0
    """Rows (chunks) advanced, summed over steps: the useful work."""
    slot_steps: int = 0
    """Rows computed, summed over steps: useful rows plus padding and finished rows still computed."""
    rows_admitted: int = 0
    rows_finished: int = 0
    suspects: int = 0
    """Rows re-run alone because a step they shared failed."""
    out_of_memory: int = 0
    beside_cpu_s: float = 0.0
    """CPU seconds the batcher's threads beside its loop (audio decoding, prefill) have used, as of its last step: they
    take the same cores as the steps, so the worker counts them in a step's cost (0 for a batcher without them)."""

    @property
    def mean_occupied(self) -> float:
        """Rows in flight per step, on average."""
        return self.row_steps / self.steps if self.steps else 0.0

    @property
    def wasted_fraction(self) -> float:
        return 1 - self.row_steps / self.slot_steps if self.slot_steps else 0.0


class Batcher(Protocol):
    """Requests in, chunks of audio out, one step at a time: how the worker drives an engine.

    Blocking and single-threaded (the worker's inference thread makes every call). ``add`` queues
    a request's chunks; ``step`` runs one step (a decode step of every row in flight, or one whole
    grouped call) and returns what ended. A request's chunks all come as :class:`ChunkReady` events,
    or it ends with one :class:`RequestFailed`; a batcher that decodes audio as it is generated sends a chunk's
    :class:`PieceReady` events before its :class:`ChunkReady`.
    """

    hook: StepHook | None
    stats: BatcherStats
    keep_ahead: float | None
    """The longest step, as a share of a token's audio, at which a streamed row keeps its listener fed from its first
    audio on, where the way it pieces audio sets one (:func:`ttsq.inference.audio.handoff.keep_ahead`); None: no bound of its
    own (the worker's ``STREAM_RTF_TARGET`` alone)."""

    @property
    def slots(self) -> int:
        """How many rows may run at once."""
        ...

    @property
    def slot_limit(self) -> int:
        """How many may run at once now (fewer for a while after running out of memory)."""
        ...

    @property
    def waiting_rows(self) -> int: ...

    @property
    def active_rows(self) -> int: ...

    @property
    def busy(self) -> bool: ...

    def add(self, key: str, request: SynthesisRequest, *, alone: bool = False) -> list[BatchEvent]:
        """Queue ``request`` under ``key``; ``alone``: it never shares a step with another request."""
        ...

    def prepared(self, request: SynthesisRequest) -> SynthesisRequest:
        """``request`` with the work :meth:`add` would do on its text done now (the normaliser and the sentence split:
        tens of milliseconds a sentence, held under the GIL), so that a caller does it beside the thread that steps, not
        in a stall of every row in flight. Any thread may call it. A batcher with nothing to prepare returns it as it
        is; an unusable text raises, as :meth:`add` would fail the request."""
        ...

    def cancel(self, key: str) -> None:
        """Forget a request: its waiting and running chunks are dropped, no event follows."""
        ...

    def requests(self) -> list[str]:
        """The keys of the requests in the batcher (running or waiting), oldest first: what a hung step holds up."""
        ...

    def step(self) -> list[BatchEvent]: ...


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

    def speaker_from_audio(self, samples: npt.NDArray[np.float32]) -> str:
        """ChatTTS's speaker prompt (``spk_smp``) for a mono 24 kHz recording: its DVAE codes, compressed."""
        ...

    def blend_speakers(self, speakers: Sequence[str], weights: Sequence[float]) -> str:
        """The blend of speaker embeddings by weights, under :func:`ttsq.domain.blends.blend_embedding`'s rule with
        this checkpoint's ``spk_stat``; ValueError for components that do not fit the model."""
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

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        """A batcher of ``slots`` rows over this engine (the worker makes one, after :meth:`warm_up`);
        after running out of memory it uses fewer slots for ``oom_recover_s``."""
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

    def speaker_from_audio(self, samples: npt.NDArray[np.float32]) -> str:
        return self.inner.speaker_from_audio(samples)

    def blend_speakers(self, speakers: Sequence[str], weights: Sequence[float]) -> str:
        return self.inner.blend_speakers(speakers, weights)

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

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        return self.inner.batcher(slots, oom_recover_s=oom_recover_s)


def synthesize(engine: Engine, req: SynthesisRequest) -> npt.NDArray[np.float32]:
    """One request's whole audio, its chunks joined the way the worker joins them (for tests and scripts)."""
    samples = join_chunks([chunk.samples for _, chunk in engine.synthesize_batch([req])])
    if samples.size == 0:
        raise TransientError("model produced no audio")
    return samples


def typed(exc: BaseException) -> BaseException:
    """An engine failure in the engine contract's types (torch's OOM included), so the worker need not know torch."""
    if isinstance(exc, InferenceError):
        return exc
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return OutOfMemory(str(exc))
    except ImportError:  # pragma: no cover - torch is always there when a decoder runs
        pass
    if isinstance(exc, ValueError):
        return PermanentError(str(exc))
    return TransientError(f"{type(exc).__name__}: {exc}")
