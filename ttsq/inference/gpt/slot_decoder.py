"""ttsq's own ChatTTS decode loop: a fixed set of slots, each row with its own everything.

ChatTTS's ``GPT.generate`` decodes one padded batch that shares one temperature, one set of
sampling warpers and one random stream, grows its KV cache by concatenation and runs until its
longest row ends. This module decodes the same LLaMA weights differently:

* **Slots.** The KV cache is preallocated: ``slots x layers x max_len`` keys and values, written in
  place at each row's own position. A row is admitted into a free slot (its prompt prefilled
  alone, or with the rows admitted at the same step), steps with whatever else is in flight, and
  leaves the moment it ends; the slot is free at
  the next step boundary, and :meth:`SlotDecoder.compact` moves the rows above it down, so a step
  covers as many slots as there are rows. No tensor is concatenated while decoding.
* **Rows.** Temperature, top-p, top-k, repetition penalty, min/max new tokens, the end token and
  the random stream are per-row tensors, so any mix of voices and parameters shares one step.
* **Random stream.** ChatTTS, given ``manual_seed``, re-seeds its generator before *every* step's
  ``torch.multinomial``; for one token per row that call is ``argmax(p / q)`` with ``q ~ Exp(1)``
  drawn from the freshly seeded generator, so ``q`` is the same at every step. Each row here draws
  its own ``q`` once, from a generator seeded with the row's seed and with the shape ChatTTS uses
  at batch 1, and samples ``argmax(p / q)`` every step: a row's tokens are exactly what ChatTTS
  gives that row alone, and never depend on batch-mates (ChatTTS draws one ``q`` for the whole
  batch, so a row's tokens there depend on its position and neighbours).
* **Fixed shapes.** A decode step reads and writes only preallocated buffers, with no host
  synchronisation inside; on CUDA one step per batch bucket (the lowest ``n`` slots) and attention
  window (the cache's first ``w`` positions, ``w`` a power of two from 32, or the whole cache) is
  captured as a CUDA graph and replayed, so a step reads the keys and values of at most twice its
  longest row's positions rather than the whole preallocated cache. On a CPU it runs eagerly,
  attending to a window just long enough for the longest row.

The per-step arithmetic mirrors ChatTTS 0.2.5 operation by operation (temperature, repetition
penalty over the last 16 tokens, top-p then top-k with at least 3 tokens kept, the end token
masked until ``min_new_token``, float32 logits), which is what lets the tests hold its output equal
to ChatTTS's own. One upstream quirk is deliberately not copied: its repetition penalty is skipped
for batch rows past ``num_audio_tokens`` (a slicing of the wrong axis), which only matters for
batches above 156 and would make a row's audio depend on its slot.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import torch

from ttsq.inference.gpt.graphs import StepGraphs, buckets, windows
from ttsq.inference.gpt.layers import (
    Blocks,
    Precision,
    activation,
    fused,
    fused_rms_norm,
    linear,
    onednn,
    packs_weights,
    rms_norm,
    rotary_tables,
)
from ttsq.inference.gpt.sampling import MIN_TOKENS_TO_KEEP, PENALTY_WINDOW, filtered_by_selection, filtered_by_sort
from ttsq.inference.gpt.slots import (
    DecoderShape,
    Finished,
    Prefilled,
    RowParams,
    prefill_groups,
    stream_seed,
)

__all__ = [
    "MIN_TOKENS_TO_KEEP",
    "PENALTY_WINDOW",
    "DecoderShape",
    "Finished",
    "Precision",
    "Prefilled",
    "RowParams",
    "SlotDecoder",
    "prefill_groups",
    "stream_seed",
]

Mode = Literal["code", "text"]


class SlotDecoder:
    """Decodes up to ``shape.slots`` rows at once over one ChatTTS GPT. Blocking; one thread.

    ``mode="code"`` generates audio codes (four heads, ChatTTS's ``infer_code``); ``mode="text"``
    generates text tokens (``refine_text``). Both modes can share one GPT: each has its own cache.

    Args:
        gpt: ChatTTS's ``LlamaModel`` (``chat.gpt.gpt``).
        embed: ChatTTS's ``Embed`` module (``chat.embed``): code and text embeddings and heads.
        mode: what the rows generate.
        eos: the end token (``num_audio_tokens - 1`` for codes, ``[Ebreak]`` for text).
        shape: slots and lengths.
        dtype: the GPT's compute dtype (its weights' dtype; float64 in the equality tests).
        head_dtype: the heads' and embeddings' dtype (ChatTTS: float32, on the float32-cast state).
        cuda_graphs: capture each batch bucket's step as a CUDA graph (CUDA devices only).
        static_shapes: step as a captured graph does — the whole bucket, the window bucket under a
            mask, the full sort — but eagerly: how the tests check the graph path's arithmetic on a CPU.
        batch_invariant: every step computes every slot over the whole cache (one bucket), so each
            product has the same shape whatever is in flight and a row's bits never depend on its
            batch-mates, in float32 too (a decoder of the same slot count gives the same bits).
        packed_weights: on a CPU in float32, reorder the GPT's projections and the heads once into
            oneDNN's blocked layout and multiply through oneDNN (:func:`packs_weights`): over twice
            as fast at batch 8 as MKL's sgemm on plain weights (BENCHMARKS.md), the same tokens.
            Ignored elsewhere.
        precision: what the projections multiply in (:data:`Precision`); ``bf16`` and ``int8``
            need a CPU and a float32 GPT, and change codes (BENCHMARKS.md gives their agreement).
    """

    def __init__(
        self,
        gpt: Any,
        embed: Any,
        *,
        mode: Mode,
        eos: int,
        shape: DecoderShape,
        dtype: torch.dtype,
        head_dtype: torch.dtype,
        cuda_graphs: bool = False,
        static_shapes: bool = False,
        batch_invariant: bool = False,
        packed_weights: bool = False,
        precision: Precision = "fp32",
    ) -> None:
        import torch

        config = gpt.config
        self.mode: Mode = mode
        self.eos = eos
        self.shape = shape
        self.dtype = dtype
        self.head_dtype = head_dtype
        self.device = next(gpt.parameters()).device
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.num_heads)
        self.hidden = int(config.hidden_size)
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self.batch_invariant = batch_invariant
        self.static_shapes = static_shapes or self.cuda_graphs or batch_invariant
        self._graphs = StepGraphs(self.device)
        all_float32 = dtype == torch.float32 and gpt.norm.weight.dtype == torch.float32
        self._norm = fused_rms_norm if all_float32 else rms_norm
        num_vq = int(embed.num_vq)
        self.streams = num_vq if mode == "code" else 1
        """Tokens per row per step: four codebooks for audio, one token for text."""
        if precision != "fp32" and not packs_weights(self.device, dtype):
            raise ValueError(f"PRECISION={precision} needs a CPU and a float32 GPT (got {self.device.type}, {dtype})")
        self.precision: Precision = precision
        self.packed_weights = (packed_weights or precision != "fp32") and packs_weights(self.device, dtype)
        """Whether the projections (and, in float32, the heads) are packed: for oneDNN, or for fbgemm (int8)."""
        with torch.no_grad():
            self._layers = [fused(layer, dtype, pack=self.packed_weights, precision=precision) for layer in gpt.layers]
            self._blocks = Blocks(self.num_heads, self.num_kv_heads, self.head_dim, self._norm, activation(gpt.layers[0].mlp))
            self._final_norm = (gpt.norm.weight.detach(), float(gpt.norm.variance_epsilon))
            if mode == "code":
                # The heads are weight-normed; ChatTTS evaluates the parametrization once per step
                # (``P.cached()``): materialise it once, the same values every step.
                heads = [embed.head_code[q].weight.detach() for q in range(num_vq)]
                tables = [embed.emb_code[q].weight.detach() for q in range(num_vq)]
            else:
                heads, tables = [embed.head_text.weight.detach()], [embed.emb_text.weight.detach()]
            self.vocab = int(heads[0].shape[0])
            self._heads = torch.cat(heads, 0).to(head_dtype).contiguous()
            if self.packed_weights and packs_weights(self.device, head_dtype):
                self._heads = onednn(self._heads)
            self._table = torch.cat(tables, 0).to(head_dtype).contiguous()
            self._offsets = torch.arange(self.streams, device=self.device) * int(tables[0].shape[0])
            self._cos, self._sin = rotary_tables(gpt, shape.max_len + 1, self._blocks, dtype, self.device)
        self._allocate()

    # ---- buffers ----------------------------------------------------------------------------

    def _allocate(self) -> None:
        import torch

        s, n, dev = self.shape.slots, self.shape.max_new, self.device
        cache = (s, 2 * self.num_kv_heads, self.shape.max_len + 1, self.head_dim)
        self.kv_cache = [torch.zeros(cache, dtype=self.dtype, device=dev) for _ in self._layers]
        """Per layer: every slot's keys (the first ``num_kv_heads`` heads) then values, by position."""
        self.positions = torch.zeros(s, dtype=torch.long, device=dev)
        """Where each slot's next key/value goes (= positions filled so far)."""
        self.generated = torch.zeros(s, dtype=torch.long, device=dev)
        self.last = torch.zeros(s, self.streams, dtype=torch.long, device=dev)
        self.finished = torch.ones(s, dtype=torch.bool, device=dev)
        self.temperature = torch.ones(s, 1, 1, dtype=torch.float32, device=dev)
        self.top_p_floor = torch.zeros(s, 1, 1, dtype=torch.float32, device=dev)
        """``1 - top_p``, computed in Python floats as ChatTTS's warper does, then compared in float32."""
        self.kth = torch.zeros(s, self.streams, 1, dtype=torch.long, device=dev)
        """Where the k-th largest logit sits in ascending order: ``vocab - max(top_k, 3)``."""
        self.penalty = torch.ones(s, 1, 1, dtype=torch.float32, device=dev)
        self.min_new = torch.zeros(s, 1, dtype=torch.long, device=dev)
        self.max_new = torch.ones(s, dtype=torch.long, device=dev)
        self.last_index = torch.zeros(s, dtype=torch.long, device=dev)
        """``max_new - 1``: the row ends after sampling at this index, whatever it sampled."""
        self.noise = torch.ones(s, self.streams, self.vocab, dtype=torch.float32, device=dev)
        self.window = torch.zeros(s, self.streams, PENALTY_WINDOW, dtype=torch.long, device=dev)
        """The row's last :data:`PENALTY_WINDOW` tokens, a ring indexed by ``generated % 16``."""
        self.recent = torch.zeros(s, self.streams, PENALTY_WINDOW, dtype=torch.float32, device=dev)
        """1.0 where ``window`` holds one of this row's tokens (its first 16 steps fill it)."""
        self.tokens = torch.zeros(s, n, self.streams, dtype=torch.long, device=dev)
        self.hiddens = torch.zeros(s, n, self.hidden, dtype=torch.float32, device=dev) if self.mode == "code" else None
        self._slot_ids = torch.arange(s, device=dev)
        self._key_positions = torch.arange(self.shape.max_len + 1, device=dev)
        self._counts = torch.zeros(s, self.streams, self.vocab, dtype=torch.float32, device=dev)
        ranks = torch.arange(self.vocab, device=dev)
        self._always_kept = ranks < MIN_TOKENS_TO_KEEP
        self.top_p_floor64 = torch.zeros(s, 1, 1, dtype=torch.float64, device=dev)
        self.within_top_k = torch.zeros(s, 1, self.vocab, dtype=torch.bool, device=dev)
        """By rank: whether top-k keeps it (rank < max(top_k, 3))."""
        self.decided = torch.zeros(s, 1, self.vocab, dtype=torch.bool, device=dev)
        """By rank: whether the row's top-p decision there can change the result (3 <= rank < top-k)."""
        self._top_k = [MIN_TOKENS_TO_KEEP] * s
        """Host copy of each slot's effective top-k (sizes the CPU's top-k selection)."""
        self._below_min = [0] * s
        """Host count of the samples each slot still takes with its end token barred (``min_new_token``
        minus tokens sampled): while every row of an eager step is past it, the step skips the mask."""
        self._free = list(range(s))
        self._lengths = [0] * s
        """Host copy of ``positions`` (no device read is needed to size the attention window)."""
        self.active = [False] * s
        self.computed = 0
        """Slots the last step computed (its span, or its CUDA graph's bucket)."""
        self.attended = 0
        """Cache positions the last step's attention read per slot (the longest row's, or its window's)."""

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def occupied(self) -> int:
        return self.shape.slots - len(self._free)

    def span(self) -> int:
        """How many leading slots a step must cover: one past the highest occupied slot."""
        return max((slot + 1 for slot, on in enumerate(self.active) if on), default=0)

    # ---- admission ---------------------------------------------------------------------------

    def admit(self, prompt: torch.Tensor, params: RowParams) -> tuple[int, Finished | None]:
        """Prefill ``prompt`` ((positions, hidden) embeddings) into the lowest free slot and sample
        the row's first token. Returns the slot, and the row itself if it already ended."""
        return self.place(self.prefill(prompt), params)

    def prefill(self, prompt: torch.Tensor) -> Prefilled:
        """Run a row's prompt through the GPT, alone (:meth:`prefill_many` of one prompt)."""
        return self.prefill_many([prompt])[0]

    def prefill_many(self, prompts: Sequence[torch.Tensor]) -> list[Prefilled]:
        """Run rows' prompts ((positions, hidden) embeddings) through the GPT, several in one pass: on a GPU, rows
        admitted together cost one pass's kernel launches instead of one per row. Touches no slot: another
        thread may run it while this decoder steps (it reads only the weights).

        Prompts are right-padded to the longest of their group, and attention is causal, so no position of a row sees
        the padding after it: each row's keys, values and last state are its own to within rounding (a padded batch's
        matrix products may round in another order than one row's; tested in float64 to a few ulps), as a step's rows
        are. Groups keep their padded positions within :data:`PREFILL_PADDING` of their rows' own (a long speaker prompt
        does not pad thirty short ones). On a batch-invariant decoder every prompt runs alone, so its bits never depend
        on its company."""
        import torch
        import torch.nn.functional as F

        lengths = [int(prompt.shape[0]) for prompt in prompts]
        for length in lengths:
            if not 0 < length <= self.shape.max_prompt:
                raise ValueError(f"a prompt of {length} positions does not fit (at most {self.shape.max_prompt})")
        out: list[Prefilled | None] = [None] * len(prompts)
        kv_heads = self.num_kv_heads
        with torch.inference_mode():
            for group in prefill_groups(lengths, alone=self.batch_invariant):
                longest = lengths[group[0]]
                x = torch.zeros(len(group), longest, self.hidden, dtype=self.dtype, device=self.device)
                for row, index in enumerate(group):
                    x[row, : lengths[index]] = prompts[index]
                cos, sin = self._cos[:longest].transpose(0, 1).unsqueeze(0), self._sin[:longest].transpose(0, 1).unsqueeze(0)
                kvs = []
                for layer in self._layers:
                    q, kv = self._blocks.qkv(layer, x, cos, sin)
                    kvs.append(kv)
                    keys, values = self._blocks.expand(kv[:, :kv_heads]), self._blocks.expand(kv[:, kv_heads:])
                    attended = F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=layer.scale)
                    x = self._blocks.rest(layer, x, attended)
                last = torch.tensor([lengths[index] - 1 for index in group], device=self.device)
                hidden = self._norm(x[torch.arange(len(group), device=self.device), last], *self._final_norm).to(torch.float32)
                for row, index in enumerate(group):
                    out[index] = Prefilled([kv[row, :, : lengths[index]] for kv in kvs], hidden[row : row + 1])
        return [prefilled for prefilled in out if prefilled is not None]

    def place(self, prefilled: Prefilled, params: RowParams) -> tuple[int, Finished | None]:
        """Put a prefilled row into the lowest free slot and sample its first token. Returns the slot,
        and the row itself if it already ended."""

        if not self._free:
            raise RuntimeError("no free slot")
        if params.max_new_token > self.shape.max_new:
            raise ValueError(f"max_new_token {params.max_new_token} exceeds this decoder's {self.shape.max_new}")
        length = prefilled.length
        slot = self._free.pop(0)
        with inference():
            self._reset(slot, params)
            for cache, kv in zip(self.kv_cache, prefilled.kv, strict=True):
                cache[slot, :, :length] = kv
            self.positions[slot] = length
            self._lengths[slot] = length
            self.active[slot] = True
            self._sample(slice(slot, slot + 1), prefilled.hidden)
        ended = self._collect([slot])
        return slot, (ended[0] if ended else None)

    def _reset(self, slot: int, params: RowParams) -> None:
        import torch

        self.positions[slot] = 0
        self.generated[slot] = 0
        self.finished[slot] = False
        self.temperature[slot] = params.temperature
        self.top_p_floor[slot] = 1 - float(params.top_p)
        top_k = min(max(params.top_k, MIN_TOKENS_TO_KEEP), self.vocab)
        self.kth[slot] = self.vocab - top_k
        self._top_k[slot] = top_k
        # float64 of the float32 floor, computed on the host: reading the device tensor back would wait for the GPU
        self.top_p_floor64[slot] = float(np.float32(1 - float(params.top_p)))
        self.within_top_k[slot] = _ranks(self.vocab, 0, top_k, self.device)
        self.decided[slot] = _ranks(self.vocab, MIN_TOKENS_TO_KEEP, top_k, self.device)
        self.penalty[slot] = params.repetition_penalty
        self.min_new[slot] = params.min_new_token
        self._below_min[slot] = params.min_new_token
        self.max_new[slot] = params.max_new_token
        self.last_index[slot] = params.max_new_token - 1
        self.recent[slot] = 0
        generator = torch.Generator(device=self.device).manual_seed(params.seed)
        # Exactly the draw ChatTTS makes for one row: ``torch.multinomial`` on (streams, vocab)
        # float32 probabilities samples ``argmax(p / q)`` with ``q = empty_like(p).exponential_()``.
        noise = torch.empty(self.streams, self.vocab, dtype=torch.float32, device=self.device)
        self.noise[slot] = noise.exponential_(1, generator=generator)

    # ---- one step ----------------------------------------------------------------------------

    def step(self) -> list[Finished]:
        """Advance every occupied slot by one token; the rows that ended (their slots are free now)."""

        span = self.span()
        self.computed = self.attended = 0
        if span == 0:
            return []
        with inference():
            if self.cuda_graphs:
                self.computed, self.attended = self._shape(span)
                self._graphs.replay(self.computed, self.attended)
            elif self.static_shapes:
                self.computed, self.attended = self._shape(span)
                self._decode(self.computed, self.attended)
            else:
                # Eagerly, shapes cost nothing: attend to exactly the longest row, and when every
                # slot of the span holds a row at the same position, skip the mask and the gathers.
                self.computed = span
                lengths = self._lengths[:span]
                uniform = lengths[0] if all(self.active[:span]) and lengths.count(lengths[0]) == span else None
                self.attended = max(lengths) + 1
                self._decode(span, self.attended, uniform)
        occupied = [slot for slot in range(span) if self.active[slot]]
        for slot in occupied:
            self._lengths[slot] += 1
        return self._collect(occupied)

    def _decode(self, n: int, window: int, at: int | None = None) -> None:
        """One token for slots ``[0, n)``, attending to the first ``window`` cache positions
        (``at``: every one of them is a row at this position, known on the host).

        Reads and writes only preallocated buffers and never synchronises with the host, so it
        can be captured as a CUDA graph. Free slots inside the span compute garbage that nothing
        reads (their outputs are never collected, and admission resets a slot's state)."""
        import torch.nn.functional as F

        rows = self._slot_ids[:n]
        positions = self.positions[:n]
        x = self._embed_last(n).unsqueeze(1)
        mask = None
        if at is None:
            cos, sin = self._cos[positions].unsqueeze(2), self._sin[positions].unsqueeze(2)
            mask = (self._key_positions[:window] <= positions.unsqueeze(1)).view(n, 1, 1, window)
        else:
            cos, sin = self._cos[at : at + 1].unsqueeze(2), self._sin[at : at + 1].unsqueeze(2)
        kv_heads = self.num_kv_heads
        for layer, cache in zip(self._layers, self.kv_cache, strict=True):
            q, kv = self._blocks.qkv(layer, x, cos, sin)
            if at is None:
                cache[rows, :, positions] = kv[:, :, 0]
            else:
                cache[:n, :, at] = kv[:, :, 0]
            keys, values = self._blocks.expand(cache[:n, :kv_heads, :window]), self._blocks.expand(cache[:n, kv_heads:, :window])
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=layer.scale)
            x = self._blocks.rest(layer, x, out)
        hidden = self._norm(x[:, 0], *self._final_norm).float()
        self.positions[:n] += ~self.finished[:n]
        self._sample(slice(0, n), hidden)

    def _embed_last(self, n: int) -> torch.Tensor:
        """The next input: the sum of the four code embeddings (in ChatTTS's order), or the text embedding."""
        import torch.nn.functional as F

        embedded = F.embedding(self.last[:n] + self._offsets, self._table)
        return (embedded[:, 0] if self.streams == 1 else embedded.sum(1)).to(self.dtype)

    def _sample(self, rows: slice, hidden: torch.Tensor) -> None:
        """Pick each row's next token(s) from ``hidden`` ((rows, hidden) float32) and record them.

        Operation by operation ChatTTS's sampling: logits in float32; divided by the temperature;
        the repetition penalty; top-p (sorted ascending, softmax, cumulative sum, at least 3 kept);
        top-k (at least 3); the end token barred before ``min_new_token``; softmax; ``argmax(p / q)``.
        """
        import torch

        n = hidden.shape[0]
        logits = linear(hidden.to(self.head_dtype), self._heads).view(n, self.streams, self.vocab)
        logits = logits.float() / self.temperature[rows]
        counts = self._counts[rows].zero_().scatter_add_(-1, self.window[rows], self.recent[rows])
        alpha = torch.pow(self.penalty[rows], counts)
        logits = torch.where(logits < 0, logits * alpha, logits / alpha)
        by_sort = self.static_shapes or self.device.type != "cpu"
        if by_sort:
            removed = filtered_by_sort(logits, self.top_p_floor[rows], self.kth[rows])
        else:
            removed = filtered_by_selection(
                logits,
                top_k=max(self._top_k[rows]),
                top_p_floor=self.top_p_floor[rows],
                top_p_floor64=self.top_p_floor64[rows],
                kth=self.kth[rows],
                within_top_k=self.within_top_k[rows],
                decided=self.decided[rows],
                always_kept=self._always_kept,
            )
        logits = logits.masked_fill(removed, -math.inf)
        generated = self.generated[rows]
        barring = self._below_min[rows]
        if self.static_shapes or any(barring):
            logits[..., self.eos].masked_fill_(generated.unsqueeze(1) < self.min_new[rows], -math.inf)
        self._below_min[rows] = [max(0, left - 1) for left in barring]
        token = (logits.softmax(dim=-1) / self.noise[rows]).argmax(dim=-1)
        keep = (token != self.eos).all(dim=-1) & ~self.finished[rows]
        # A free slot inside the step's span computes garbage; clamping keeps its writes in bounds.
        index = self._slot_ids[rows]
        at = generated.clamp(max=self.shape.max_new - 1)
        self.tokens[index, at] = token
        if self.hiddens is not None:
            self.hiddens[index, at] = hidden
        ring = generated % PENALTY_WINDOW
        self.window[index, :, ring] = token
        self.recent[index, :, ring] = 1.0
        self.last[rows] = token
        self.finished[rows] = ~keep | (generated >= self.last_index[rows])
        self.generated[rows] += keep

    # ---- finishing ----------------------------------------------------------------------------

    def _collect(self, slots: Sequence[int]) -> list[Finished]:
        """Read which of ``slots`` ended (one small device-to-host copy) and free them."""
        if not slots:
            return []
        flags = self.finished[: max(slots) + 1].tolist()
        ended = [slot for slot in slots if flags[slot]]
        if not ended:
            return []
        counts = self.generated[ended].tolist()
        limits = self.max_new[ended].tolist()
        out = []
        for slot, count, limit in zip(ended, counts, limits, strict=True):
            tokens = self.tokens[slot, :count].clone()
            out.append(
                Finished(
                    slot=slot,
                    tokens=tokens if self.mode == "code" else tokens[:, 0],
                    hiddens=None if self.hiddens is None else self.hiddens[slot, :count].clone(),
                    hit_limit=count >= limit,
                )
            )
            self.release(slot)
        return out

    def release(self, slot: int) -> None:
        """Free ``slot`` (its row ended, or is being dropped: cancelled, failed, preempted)."""
        if self.active[slot]:
            self.finished[slot] = True  # a free slot inside a step's span must not advance
            self.active[slot] = False
            self._lengths[slot] = 0
            self._free.append(slot)
            self._free.sort()

    def compact(self) -> list[tuple[int, int]]:
        """Move the rows of the highest occupied slots into the free slots below them, so that a step covers as many
        slots as there are rows: a step computes every slot up to the highest occupied one (eagerly, the free ones among
        them are wasted rows; captured, they pick the batch bucket), and rows end at their own time, leaving holes that
        admission fills only while rows wait. Returns each move as ``(from, to)``; whoever maps rows to slots follows it.

        A move copies the row's state and the keys and values it has so far, nothing that depends on where it sits: the
        row decodes on as it would have in its old slot (tested). None on a batch-invariant decoder, whose steps cover
        every slot anyway."""
        moves: list[tuple[int, int]] = []
        if self.batch_invariant:
            return moves
        with inference():
            while self._free and self._free[0] < self.span() - 1:
                source, target = self.span() - 1, self._free.pop(0)
                length = self._lengths[source]
                for cache in self.kv_cache:
                    cache[target, :, :length] = cache[source, :, :length]
                # tokens and states so far: at most the positions the row has (its prompt's among them)
                made = min(length, self.shape.max_new)
                for tensor in self._per_row():
                    tensor[target, :made] = tensor[source, :made]
                for tensor in self._per_slot():
                    tensor[target] = tensor[source]
                for host in (self._top_k, self._below_min, self._lengths):
                    host[target] = host[source]
                self.active[target] = True
                self.release(source)
                moves.append((source, target))
        return moves

    def _per_row(self) -> list[torch.Tensor]:
        """The row's tokens and states, by token (a move copies only those made so far)."""
        return [self.tokens] + ([self.hiddens] if self.hiddens is not None else [])

    def _per_slot(self) -> list[torch.Tensor]:
        """Every per-slot tensor a row's next steps read, but the cache and :meth:`_per_row`."""
        return [
            self.positions,
            self.generated,
            self.last,
            self.finished,
            self.temperature,
            self.top_p_floor,
            self.top_p_floor64,
            self.kth,
            self.within_top_k,
            self.decided,
            self.penalty,
            self.min_new,
            self.max_new,
            self.last_index,
            self.noise,
            self.window,
            self.recent,
        ]

    # ---- CUDA graphs -------------------------------------------------------------------------

    def buckets(self) -> list[int]:
        """The spans a step may cover (:func:`~ttsq.inference.gpt.graphs.buckets`)."""
        return buckets(self.shape.slots, batch_invariant=self.batch_invariant)

    def windows(self) -> list[int]:
        """The attention windows a step may read (:func:`~ttsq.inference.gpt.graphs.windows`)."""
        return windows(self.shape.max_len + 1, batch_invariant=self.batch_invariant)

    def capture(self) -> None:
        """Capture one decode step per bucket and window (CUDA only). Called once, before serving."""
        if self.cuda_graphs:
            shapes = [(bucket, window) for bucket in self.buckets() for window in self.windows()]
            self._graphs.capture(shapes, self._decode, self._per_slot() + self._per_row())

    def _shape(self, span: int) -> tuple[int, int]:
        """The captured shape a step over ``span`` slots runs at: the smallest bucket that holds them, and the
        smallest window that holds their longest row's positions and the one its step writes."""
        longest = max(self._lengths[:span]) + 1
        return next(size for size in self.buckets() if size >= span), next(w for w in self.windows() if w >= longest)


def _ranks(vocab: int, start: int, stop: int, device: torch.device) -> torch.Tensor:
    """A (vocab,) mask, True at ranks ``[start, stop)``: made on the host's terms, no device read."""
    import torch

    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[start:stop] = True
    return mask


def inference() -> contextlib.AbstractContextManager[Any]:
    """``torch.inference_mode()``, or nothing when the thread is in it already: entering it costs about
    as much as one of a tiny model's kernels, so the scheduler holds it across a whole step."""
    import torch

    return contextlib.nullcontext() if torch.is_inference_mode_enabled() else torch.inference_mode()
