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

from ttsq.inference.gpt.layers import (
    Layer,
    Precision,
    activation,
    fused,
    fused_rms_norm,
    linear,
    onednn,
    packs_weights,
    per_head,
    rms_norm,
)
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

MIN_TOKENS_TO_KEEP = 3
"""ChatTTS builds its top-p and top-k warpers with ``min_tokens_to_keep=3``: a top_k of 1 keeps 3."""
PENALTY_WINDOW = 16
"""ChatTTS's repetition penalty counts the last 16 generated tokens."""
_CUMULATIVE_ERROR_BOUND = 1e-4
"""How far ChatTTS's float32 top-p sums may be from the exact ones: each of up to 626 sequential
float32 additions rounds by at most 2^-24 of a sum below 1 (3.7e-5 in all), and the softmax's
own rounding adds about a millionth. Decisions nearer the threshold than this go to the full sort."""

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
        self._graphs: dict[tuple[int, int], Any] = {}
        self._act = activation(gpt.layers[0].mlp)
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
            # RoPE for every position at once: the same products and cos/sin as per step (each
            # angle is one multiplication), so a lookup replaces ten kernels per step.
            positions = torch.arange(shape.max_len + 1, device=self.device).unsqueeze(0)
            probe = torch.zeros(1, 1, self.hidden, dtype=dtype, device=self.device)
            cos, sin = gpt.rotary_emb(probe, positions)
            # One table per q/k/v head, values' entries the identity (cos 1, sin 0: v * 1 + r * 0 == v
            # exactly), so one multiply-add rotates queries and keys and leaves values as they are.
            rotated = self.num_heads + self.num_kv_heads
            identity = torch.ones_like(cos[0]), torch.zeros_like(sin[0])
            self._cos = per_head(cos[0], identity[0], rotated, self.num_kv_heads)
            # rotate_half(x) * sin == roll(x, d/2) * (sign * sin), sign -1 on the first half:
            # (-a) * b and a * (-b) are the same float, so this stays bit-equal to transformers.
            half = self.head_dim // 2
            sign = torch.ones(self.head_dim, dtype=sin.dtype, device=self.device)
            sign[:half] = -1
            self._sin = per_head(sin[0] * sign, identity[1], rotated, self.num_kv_heads)
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
        """Host copy of each slot's effective top-k (sizes the CPU's top-k selection)."""
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
        admitted together cost one pass's kernel launches instead of one per row (issue 30). Touches no slot: another
        thread may run it while this decoder steps (it reads only the weights).

        Prompts are right-padded to the longest of their group, and attention is causal, so no position of a row sees
        the padding after it: each row's keys, values and last state are its own — bit for bit in float64 (tested),
        within float32 rounding otherwise, as a step's rows are. Groups keep their padded positions within
        :data:`PREFILL_PADDING` of their rows' own (a long speaker prompt does not pad thirty short ones). On a
        batch-invariant decoder every prompt runs alone, so its bits never depend on its company."""
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
                    q, kv = self._qkv(layer, x, cos, sin)
                    kvs.append(kv)
                    keys, values = self._expand(kv[:, :kv_heads]), self._expand(kv[:, kv_heads:])
                    attended = F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=layer.scale)
                    x = self._block_rest(layer, x, attended)
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

    def _qkv(self, layer: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys/values of ``x`` ((rows, positions, hidden)), queries and keys rotated:
        (rows, heads, positions, dim) and (rows, 2 x kv heads, positions, dim)."""

        rows, length = x.shape[0], x.shape[1]
        heads = self.num_heads + 2 * self.num_kv_heads
        qkv = linear(self._norm(x, layer.input_norm, layer.eps), layer.qkv)
        if length == 1:  # a decode step: moving the length-1 axis is only a view
            qkv = qkv.view(rows, heads, 1, self.head_dim)
        else:
            qkv = qkv.view(rows, length, heads, self.head_dim).transpose(1, 2)
        qkv = qkv * cos + qkv.roll(self.head_dim // 2, -1) * sin
        return qkv[:, : self.num_heads], qkv[:, self.num_heads :]

    def _block_rest(self, layer: Layer, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Everything after attention: output projection, residual, MLP, residual."""

        rows, length = x.shape[0], x.shape[1]
        flat = attended.view(rows, 1, -1) if length == 1 else attended.transpose(1, 2).reshape(rows, length, -1)
        x = x + linear(flat, layer.out)
        gate, up = linear(self._norm(x, layer.post_norm, layer.eps), layer.gate_up).chunk(2, dim=-1)
        return x + linear(self._act(gate) * up, layer.down)

    def _expand(self, kv: torch.Tensor) -> torch.Tensor:
        """Repeat grouped key/value heads to the query heads (a no-op for ChatTTS, which has none)."""
        groups = self.num_heads // self.num_kv_heads
        return kv if groups == 1 else kv.repeat_interleave(groups, dim=1)

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
                self._graphs[self.computed, self.attended].replay()
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
            q, kv = self._qkv(layer, x, cos, sin)
            if at is None:
                cache[rows, :, positions] = kv[:, :, 0]
            else:
                cache[:n, :, at] = kv[:, :, 0]
            keys, values = self._expand(cache[:n, :kv_heads, :window]), self._expand(cache[:n, kv_heads:, :window])
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=layer.scale)
            x = self._block_rest(layer, x, out)
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
        removed = self._filtered_by_sort(logits, rows) if by_sort else self._filtered_by_selection(logits, rows)
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

    def _filtered_by_sort(self, logits: torch.Tensor, rows: slice) -> torch.Tensor:
        """Which tokens top-p then top-k remove, computed exactly as ChatTTS's warpers do (a full sort)."""
        import torch

        ascending, order = torch.sort(logits, dim=-1)
        dropped = ascending.softmax(dim=-1).cumsum(dim=-1) <= self.top_p_floor[rows]
        dropped[..., -MIN_TOKENS_TO_KEEP:] = False
        # Top-k on what top-p kept: top-p drops a prefix of the ascending order, so the k-th
        # largest survivor is ascending[vocab - k] unless top-p dropped that one too (then top-k drops nothing).
        kth = self.kth[rows]
        floor = torch.where(dropped.gather(-1, kth), -math.inf, ascending.gather(-1, kth))
        removed: torch.Tensor = dropped.scatter(-1, order, dropped) | (logits < floor)
        return removed

    def _filtered_by_selection(self, logits: torch.Tensor, rows: slice) -> torch.Tensor:
        """The same tokens as :meth:`_filtered_by_sort`, from a top-k selection instead of a full sort.

        A full sort of 626 logits costs ~30 us per row and stream on a CPU (4x a top-21 selection,
        and more than the rest of a tiny model's step). Only the ``k`` best tokens can survive
        top-k, so only their top-p fate matters: token of rank ``r`` is dropped when the
        probability of everything ranked below it and itself, ``1 - P(ranks < r)``, is at most
        ``1 - top_p``. That sum is computed here in float64; ChatTTS's float32 softmax and
        sequential cumulative sum differ from it by less than :data:`_CUMULATIVE_ERROR_BOUND`, so a
        decision further than that from the threshold is ChatTTS's decision. Rows with a decision
        closer than that, or with equal logits at the cut (where the sort's tie order decides), are
        computed by the full sort instead: the result is always the sort's, bit for bit.
        """
        import torch

        keep_most = min(self.vocab, max(self._top_k[rows]) + 1)
        best, where = torch.topk(logits, keep_most, dim=-1)
        weights = torch.exp((logits - best[..., :1]).double())
        ranked = weights.gather(-1, where)
        total = weights.sum(-1, keepdim=True)
        # For rank r: 1 - P(ranks < r), the share of the sorted cumulative sum ChatTTS compares.
        remainder = (total - (ranked.cumsum(-1) - ranked)) / total
        floor = self.top_p_floor64[rows]
        kept = ~(remainder <= floor) | self._always_kept[:keep_most]
        kept &= self.within_top_k[rows, :, :keep_most]
        removed = torch.ones_like(logits, dtype=torch.bool).scatter_(-1, where, ~kept)
        close = ((remainder - floor).abs() < _CUMULATIVE_ERROR_BOUND) & self.decided[rows, :, :keep_most]
        tied = best[..., 1:] == best[..., :-1]
        if bool(close.any() | tied.any()):  # one host read for both
            unsure = close.any(dim=-1).any(dim=-1) | tied.any(dim=-1).any(dim=-1)
            for row in unsure.nonzero().view(-1).tolist():
                one = slice(rows.start + row, rows.start + row + 1)
                removed[row : row + 1] = self._filtered_by_sort(logits[row : row + 1], one)
        return removed

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
        """The spans a step may cover (a graph is captured for each): 1, 2, 4, then every 8 below 256 and every 16
        beyond (vLLM's capture sizes), and the slot count; only the count when the decoder is batch-invariant. Rows are
        compacted into the lowest slots (:meth:`compact`), so a step pads its rows by at most 7 (15 past 256):
        powers of two padded 47% of the row-steps at 64 slots, these 11% (``bench.engine.compaction``)."""
        slots = self.shape.slots
        if self.batch_invariant:
            return [slots]
        sizes = {1, 2, 4, *range(8, 256, 8), *range(256, slots, 16)}
        return sorted({size for size in sizes if size < slots} | {slots})

    def windows(self) -> list[int]:
        """The attention windows a step may read (a graph is captured for each, times each bucket): the
        cache's first ``w`` positions, ``w`` a power of two from 32 below the cache's length, and the whole
        cache; only the whole cache when the decoder is batch-invariant (a window that followed the
        longest batch-mate would change a row's reduction lengths, and so its bits)."""
        full = self.shape.max_len + 1
        if self.batch_invariant:
            return [full]
        return [*(1 << p for p in range(5, full.bit_length()) if 1 << p < full), full]

    def capture(self) -> None:
        """Capture one decode step per bucket and window (CUDA only). Called once, before serving."""
        import torch

        if not self.cuda_graphs:
            return
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.inference_mode(), torch.cuda.stream(stream):
            snapshot = self._snapshot()
            shapes = [(bucket, window) for bucket in self.buckets() for window in self.windows()]
            for bucket, window in shapes:
                for _ in range(2):  # warm each shape's kernels (cuBLAS workspaces, autotuning) outside capture
                    self._decode(bucket, window)
            self._restore(snapshot)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        # One memory pool for every graph, as vLLM and TGI share theirs: a step's scratch memory is dead when its replay
        # ends (every output is written into a buffer allocated outside the graphs), and graphs replay one at a time on
        # one stream, so they may reuse each other's blocks. The largest shapes go first, and the pool is their size.
        # "thread_local": a CUDA call another thread makes meanwhile (a metrics scrape's torch.cuda.mem_get_info) is its
        # own business; in the default "global" mode it would make this capture fail (issue 30, Found 4).
        pool = torch.cuda.graph_pool_handle()
        for bucket, window in sorted(shapes, reverse=True):
            graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                self._decode(bucket, window)
            self._graphs[bucket, window] = graph

    def _shape(self, span: int) -> tuple[int, int]:
        """The captured shape a step over ``span`` slots runs at: the smallest bucket that holds them, and the
        smallest window that holds their longest row's positions and the one its step writes."""
        longest = max(self._lengths[:span]) + 1
        return next(size for size in self.buckets() if size >= span), next(w for w in self.windows() if w >= longest)

    def _snapshot(self) -> list[torch.Tensor]:
        """The warm-up steps run for real; what they write to the rows' state is put back (the cache is free slots' garbage)."""
        return [t.clone() for t in self._per_slot() + self._per_row()]

    def _restore(self, snapshot: list[torch.Tensor]) -> None:
        for tensor, saved in zip(self._per_slot() + self._per_row(), snapshot, strict=True):
            tensor.copy_(saved)


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
