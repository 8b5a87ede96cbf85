"""ttsq's engine: ChatTTS's model, loaded and prepared as the reference engine does, decoded by ttsq.

``ENGINE_BACKEND=ttsq``, and the default on a CPU (``auto``; on CUDA ``auto`` keeps the reference
engine until a GPU run has confirmed this one there).

It is :class:`~ttsq.inference.engines.chattts.ChatTTSEngine` (loading, voices, text normalisation and
splitting, device statistics are shared) with ChatTTS's generation loop replaced by
:class:`~ttsq.inference.sched.scheduler.Scheduler` over :class:`~ttsq.inference.gpt.slot_decoder.SlotDecoder`:
any mix of voices, parameters and seeds shares a step, each row's audio is what ChatTTS gives that
row alone, and a slot is refilled as soon as its row ends.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.batching import Probe
from ttsq.domain.reference_audio import MAX_CHARS_PER_S, reference_positions
from ttsq.inference.audio.handoff import AudioPieces, Cadence, HandOff, keep_ahead
from ttsq.inference.audio.lead import LeadThenExact, pieces_together
from ttsq.inference.audio.streaming import streaming_decoder
from ttsq.inference.base import Batcher, BatchEvent, ChunkAudio, ChunkReady, ModelInfo, RequestFailed, SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.chattts import WARMUP_TOKENS, ChatTTSEngine, EngineConfig
from ttsq.inference.gpt.slot_decoder import DecoderShape, SlotDecoder
from ttsq.inference.sched.background import RankedExecutor
from ttsq.inference.sched.scheduler import DecodeLimits, Scheduler

if TYPE_CHECKING:
    import torch

__all__ = ["DecoderEngine", "prompt_budget"]

log = logging.getLogger(__name__)

_PROMPT_MARGIN = 16
"""Positions beyond the text itself: ``[Stts][spk_emb][speed_N]…[Ptts]``, and room for tokenizer surprises."""


def prompt_budget(max_chunk_chars: int, refine_max_new_token: int, max_reference_s: float = 0.0) -> tuple[int, int]:
    """The longest prompts (code rows, text rows) a row may bring: a chunk is at most
    ``max_chunk_chars`` characters (BERT's tokenizer makes at most one token of each), and a
    refined chunk at most ``refine_max_new_token`` tokens, re-tokenised after decoding (a quarter
    more allowed for word pieces split differently). A code row may also carry a reference voice's
    speaker prompt: the codes and transcript of up to ``max_reference_s`` seconds of recording — or, for a later chunk
    of a request with one voice across its text, of its first chunk's audio (cut to that length) and that chunk's text."""
    text = max_chunk_chars + _PROMPT_MARGIN
    chunk = max(max_chunk_chars, refine_max_new_token + refine_max_new_token // 4)
    code = chunk + _PROMPT_MARGIN
    if max_reference_s > 0:
        code += reference_positions(max_reference_s) + max(0, chunk - math.floor(MAX_CHARS_PER_S * max_reference_s))
    return code, text


class DecoderEngine(ChatTTSEngine):
    """One ChatTTS model replica decoded by ttsq's own loop. Blocking; one inference thread."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        cuda_graphs: bool,
        batch_invariant: bool,
        first_chunk_slots: int,
        overlap: bool,
        head_start: bool | None = False,
        playback_margin_s: float | None = None,
        pieces: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(config)
        self.playback_margin_s = playback_margin_s
        """The batcher's playback-aware order (:attr:`Scheduler.playback_margin_s`; None: first chunks, then arrival)."""
        self.cuda_graphs = cuda_graphs
        self.batch_invariant = batch_invariant
        self.first_chunk_slots = first_chunk_slots
        self._head_start = head_start
        """Later chunks wait for their request's first chunk (:attr:`Scheduler.head_start`); None: on a CPU only."""
        self.overlap = overlap
        """Prefill and audio decoding in two threads beside the decode loop (on a CPU; on CUDA they stay in
        the loop until a GPU run has measured the overlap with streams of their own)."""
        self.pieces = pieces
        """Audio within a chunk, as it is generated: ``(PIECE_TOKENS, PIECE_LOOKAHEAD)``, the hand-off's
        :class:`~ttsq.inference.audio.handoff.Cadence`; None: a chunk's audio is decoded at its end. Only the serving
        batcher pieces: scripts, tests and warm-up (:meth:`synthesize_batch`) take whole chunks."""
        self._pools: tuple[RankedExecutor, RankedExecutor] | None = None
        self._rows: ChatTTSRows | None = None
        self._local: Scheduler | None = None
        """A small scheduler of its own for :meth:`synthesize_batch` (warm-up, scripts, tests)."""

    def load(self) -> ModelInfo:
        info = super().load()
        if self._rows is None:
            self._rows = ChatTTSRows(self._loaded_chat())
            if self.config.compile:
                log.warning("COMPILE=true is for ENGINE_BACKEND=chattts; ttsq's decoder uses CUDA_GRAPHS instead")
        return info

    def _loaded_rows(self) -> ChatTTSRows:
        if self._rows is None:
            raise RuntimeError("the engine is not loaded; call load() first")
        return self._rows

    # ---- the batcher ------------------------------------------------------------------------

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        """A scheduler of ``slots`` rows (some kept for first chunks); on CUDA with graphs, every bucket's step is captured now."""
        return self._scheduler(
            slots,
            self._limits(),
            oom_recover_s=oom_recover_s,
            capture=True,
            reserve=self.first_chunk_slots,
            overlap=self.overlap,
            pieces=self._piecing(),
            build_text_now=True,
        )

    def _piecing(self) -> HandOff | None:
        """:attr:`pieces` for a scheduler, over this checkpoint's decoder and Vocos: each row's first ``PIECE_TOKENS``
        decoded ahead of the field once ``PIECE_TOKENS + PIECE_LOOKAHEAD`` states exist, the rest streamed exactly,
        each state through the layers once (:class:`~ttsq.inference.audio.lead.LeadThenExact`); the rows due in the
        same step decoded together (:func:`~ttsq.inference.audio.lead.pieces_together`)."""
        if self.pieces is None:
            return None
        cadence = Cadence(*self.pieces)
        chat = self._loaded_chat()
        probe = streaming_decoder(chat)

        def make() -> AudioPieces:
            return LeadThenExact(streaming_decoder(chat), cadence)

        ahead = keep_ahead(make, cadence, hidden=probe.width)
        short = probe.delay - cadence.lookahead
        log.info(
            "audio in pieces: the first %d tokens after %d steps (%s), then every %d, exact (the decoder's field: %d "
            "tokens); a stream keeps ahead of its listener while a step takes at most %.2f of a token's audio",
            cadence.piece_tokens,
            cadence.first,
            "exact" if short <= 0 else f"approximate in its last {short} tokens' reach",
            cadence.piece_tokens,
            probe.delay,
            ahead,
        )
        return HandOff(cadence, make, keep_ahead=ahead, together=pieces_together)

    @property
    def head_start(self) -> bool:
        """Whether later chunks wait for their request's first chunk: as configured, or (None) on a CPU, where a
        step's cost grows with its batch, and not on CUDA, where it barely does."""
        if self._head_start is None:
            return not self._device.startswith("cuda")
        return self._head_start

    def _overlap_pools(self) -> tuple[RankedExecutor, RankedExecutor] | None:
        """One prefill thread and one audio thread, made once per engine (on a CPU only)."""
        if self._device.startswith("cuda"):
            return None
        if self._pools is None:
            self._pools = (
                RankedExecutor("ttsq-prefill"),
                RankedExecutor("ttsq-audio"),
            )
        return self._pools

    def _limits(self, tokens: int | None = None) -> DecodeLimits:
        config = self.config
        if tokens is not None:
            return DecodeLimits(
                max_new_token=tokens,
                min_new_token=tokens,
                refine_max_new_token=config.refine_max_new_token,
                max_reference_s=config.max_reference_s,
            )
        return DecodeLimits(config.max_new_token, config.min_new_token, config.refine_max_new_token, config.max_reference_s)

    def _scheduler(
        self,
        slots: int,
        limits: DecodeLimits,
        *,
        oom_recover_s: float,
        capture: bool,
        reserve: int = 0,
        overlap: bool = False,
        pieces: HandOff | None = None,
        build_text_now: bool = False,
    ) -> Scheduler:
        rows = self._loaded_rows()
        chat = self._loaded_chat()
        code_prompt, text_prompt = prompt_budget(
            self.config.max_chunk_chars, limits.refine_max_new_token, self.config.max_reference_s
        )
        graphs = self.cuda_graphs and capture

        def decoder(mode: str, max_prompt: int, max_new: int, eos: int) -> SlotDecoder:
            made = SlotDecoder(
                chat.gpt.gpt,
                chat.embed,
                mode="code" if mode == "code" else "text",
                eos=eos,
                shape=DecoderShape(slots=slots, max_prompt=max_prompt, max_new=max_new),
                dtype=self._gpt_dtype(),
                head_dtype=self._head_dtype(),
                cuda_graphs=graphs,
                batch_invariant=self.batch_invariant,
                packed_weights=self.config.cpu_packed_weights,
                precision=self.config.precision,
            )
            if made.cuda_graphs:  # asked for and on CUDA: a CPU has no graphs to capture, and the log must not say so
                started = time.perf_counter()
                made.capture()
                elapsed = time.perf_counter() - started
                log.info(
                    "captured %s-decoder CUDA graphs for spans %s x windows %s in %.1fs",
                    mode,
                    made.buckets(),
                    made.windows(),
                    elapsed,
                )
            return made

        return Scheduler(
            rows,
            decoder("code", code_prompt, limits.max_new_token, rows.code_eos),
            lambda: decoder("text", text_prompt, limits.refine_max_new_token, rows.text_eos),
            self._split,
            limits,
            oom_recover_s=oom_recover_s,
            first_chunk_slots=reserve,
            head_start=self.head_start,
            overlap=self._overlap_pools() if overlap else None,
            playback_margin_s=self.playback_margin_s,
            pieces=pieces,
            build_text_now=build_text_now,
        )

    def _gpt_dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self._loaded_chat().gpt.gpt.parameters()).dtype
        return dtype

    def _head_dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self._loaded_chat().embed.parameters()).dtype
        return dtype

    # ---- the engine contract for scripts, tests and warm-up ------------------------------------

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        """Run ``reqs`` to the end in a scheduler of this engine's own, yielding chunks as they end."""
        if not reqs:
            return
        if self._local is None or self._local.slots < len(reqs):
            self._local = self._scheduler(max(len(reqs), 4), self._limits(), oom_recover_s=0.0, capture=False)
        yield from _drain(self._local, reqs)

    def warm_up(self) -> None:
        """One short synthesis through a scheduler: numba JIT, allocator and normalizer costs come first."""
        if self._normalizer is not None:
            self._normalizer.preload(("zh", "en"))
        request = SynthesisRequest(text=self.config.warmup_text, speaker=self.speaker_from_seed(0), seed=0)
        limits = self._limits(min(self.config.max_new_token, WARMUP_TOKENS))
        scheduler = self._scheduler(1, limits, oom_recover_s=0.0, capture=False)
        for _ in _drain(scheduler, [request]):
            pass

    def measure(self, batch: int, tokens: int) -> Probe | None:
        """On CUDA: ``batch`` rows of the longest chunk forced to ``tokens`` tokens, timed, with the peak memory."""
        if not self._device.startswith("cuda"):
            return None
        import torch

        text = ("你好世界" * self.config.max_chunk_chars)[: self.config.max_chunk_chars]
        speaker = self.speaker_from_seed(0)
        requests = [SynthesisRequest(text=text, speaker=speaker, seed=seed) for seed in range(batch)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        # The path that serves: with CUDA_GRAPHS, the captured whole-cache step, whose cost grows
        # with the batch, not the eager windowed one. Its capture (memory pools included in the peak) is not timed.
        scheduler = self._scheduler(batch, self._limits(tokens), oom_recover_s=0.0, capture=True)
        torch.cuda.synchronize()
        started = time.perf_counter()
        chunks = [chunk for _, chunk in _drain(scheduler, requests)]
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        audio_s = float(chunks[0].samples.size) / SAMPLE_RATE if chunks else 0.0
        peak = torch.cuda.max_memory_allocated()
        del scheduler
        return Probe(batch=batch, tokens=tokens, peak_bytes=peak, seconds=seconds, audio_s=audio_s)

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        """Nothing to compile: the decoder's steps have fixed shapes per bucket (CUDA graphs, when on)."""


def _drain(scheduler: Scheduler, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
    """Add ``reqs`` under their positions and step until every one has all its chunks; a failure is raised."""
    keys = [f"local-{index}" for index in range(len(reqs))]
    owner = {key: index for index, key in enumerate(keys)}
    pending = set(keys)
    seen: Counter[str] = Counter()
    try:
        for key, request in zip(keys, reqs, strict=True):
            for event in scheduler.add(key, request):
                raise _error(event)
        while pending and scheduler.busy:
            for event in scheduler.step():
                if isinstance(event, RequestFailed):
                    raise event.error
                if not isinstance(event, ChunkReady):
                    continue  # a piece: its chunk's event carries it too
                yield owner[event.key], event.chunk
                seen[event.key] += 1
                if seen[event.key] == event.chunk.total:
                    pending.discard(event.key)
    finally:
        for key in keys:
            scheduler.cancel(key)


def _error(event: BatchEvent) -> BaseException:
    return event.error if isinstance(event, RequestFailed) else RuntimeError(f"unexpected event {event!r}")
