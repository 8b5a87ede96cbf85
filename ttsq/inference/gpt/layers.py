"""The GPT's layers as ttsq's decoder multiplies them: fused where that saves a kernel, and on a CPU packed once.

:class:`~ttsq.inference.gpt.slot_decoder.SlotDecoder` runs ChatTTS's LLaMA blocks with its own arithmetic; what it multiplies
is here: each block's weights fused (q/k/v in one matrix, gate/up in one: :func:`fused`, one copy per GPT shared by
every decoder over it), on a CPU in float32 reordered once into oneDNN's blocked layout (``CPU_PACKED_WEIGHTS``:
MKL's sgemm re-packs every weight at every call), or at an opt-in ``PRECISION`` in bfloat16 or int8
(:func:`linear` multiplies each kind); and LLaMA's norms and rotary tables as transformers computes them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    import torch

__all__ = [
    "Blocks",
    "Int8",
    "Layer",
    "Precision",
    "Weight",
    "activation",
    "fused",
    "fused_rms_norm",
    "linear",
    "onednn",
    "packs_weights",
    "per_head",
    "rms_norm",
    "rotary_tables",
]

Precision = Literal["fp32", "bf16", "int8"]
"""What the GPT's projections multiply in on a CPU (``PRECISION``). ``fp32``: float32 (the tokens of
the plain path). ``bf16``: bfloat16 weights and inputs, float32 accumulation and outputs. ``int8``:
dynamic quantisation (int8 weights per output channel; each call quantises its input with one
scale computed over the whole batch, so a row's codes depend on its batch-mates). Attention, norms,
the KV cache, the heads and sampling stay float32 in all three."""


@dataclass(frozen=True)
class Int8:
    """A projection quantised for ``torch.ops.quantized.linear_dynamic`` (fbgemm's packed int8 weight)."""

    packed: Any


Weight: TypeAlias = "torch.Tensor | Int8"
"""A projection as :func:`linear` takes it: dense (MKL), oneDNN-packed (float32 or bfloat16), or int8."""


@dataclass(frozen=True)
class Layer:
    """One LLaMA block's weights, fused where that saves a kernel: q/k/v in one matrix, gate/up in one."""

    input_norm: torch.Tensor
    qkv: Weight
    out: Weight
    post_norm: torch.Tensor
    gate_up: Weight
    down: Weight
    eps: float
    scale: float


_PACK_BATCH_HINT = 8
"""The batch oneDNN lays packed weights out for: packed for 8, a decode step's matmuls ran fastest at batch 1 and at 8
alike, where packing for 1 slowed batch 8 and packing for 32 gained nothing at 32 (BENCHMARKS.md, "Measured once")."""


def packs_weights(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether oneDNN-packed weights apply: on a CPU, in float32, where torch has oneDNN.

    float32 only: it is the precision whose tokens are proven the same as the plain path's (a
    different summation order moves a logit by ~1e-6, far below any sampling decision); other
    dtypes keep the plain path they were measured with."""
    import torch

    return device.type == "cpu" and dtype == torch.float32 and bool(torch.backends.mkldnn.is_available())


def _pack(weight: torch.Tensor, precision: Precision = "fp32") -> Weight:
    """``weight`` (out, in) prepared once for :func:`linear`: reordered into oneDNN's blocked layout
    (float32, or bfloat16 for ``bf16``), or quantised to int8 per output channel and packed for fbgemm."""
    import torch

    weight = weight.contiguous()
    if precision == "int8":
        # torch's default dynamic-quantisation weight observer: symmetric, per output channel, qint8.
        observer = torch.ao.quantization.default_per_channel_weight_observer()
        observer(weight)
        scales, zeros = observer.calculate_qparams()
        quantized = torch.quantize_per_channel(weight, scales.double(), zeros.long(), 0, torch.qint8)
        return Int8(torch.ops.quantized.linear_prepack(quantized, None))
    if precision == "bf16":
        try:
            return onednn(weight.to(torch.bfloat16))
        except RuntimeError:  # a CPU without oneDNN's bf16 kernels (no AVX512-BF16 nor AVX-NE-CONVERT): torch's own
            return weight.to(torch.bfloat16)
    return onednn(weight)


def onednn(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` reordered once into oneDNN's blocked layout: an opaque tensor only :func:`linear` reads."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), _PACK_BATCH_HINT)  # type: ignore[no-any-return]


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """``x @ weight.T``: through oneDNN for a packed weight, fbgemm for an int8 one, ``F.linear``
    (MKL on a CPU) otherwise.

    oneDNN's prepacked path runs the GPT's matmuls at twice MKL's speed here and more, since MKL's
    sgemm re-packs the weight at every call (BENCHMARKS.md, "CPU matmul"). ``reduce_range`` as torch's
    own dynamically quantised ``Linear`` uses it on x86."""
    import torch
    import torch.nn.functional as F

    if isinstance(weight, Int8):
        return torch.ops.quantized.linear_dynamic(x, weight.packed, True)  # type: ignore[no-any-return]
    if weight.is_mkldnn:
        if weight.dtype == torch.bfloat16:
            return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), weight, None, "none", [], "").float()  # type: ignore[no-any-return]
        return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")  # type: ignore[no-any-return]
    if weight.dtype == torch.bfloat16 and x.dtype != torch.bfloat16:  # bf16 where oneDNN has no bf16 kernels here
        return F.linear(x.to(torch.bfloat16), weight).float()
    return F.linear(x, weight)


_FUSED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Layer]] = weakref.WeakKeyDictionary()


def fused(layer: Any, dtype: torch.dtype, *, pack: bool, precision: Precision) -> Layer:
    """One fused (and packed) copy of a LLaMA block per way of multiplying, shared by every decoder over that block:
    a worker's code and refine-text decoders (both built at start-up) then hold one copy of the full-size GPT's
    756 MB of weights between them, not one each. Keyed by the weights' storage too, so a GPT converted after a
    decoder was made (``.double()`` in the tests) gets fresh copies."""
    key = (dtype, pack, precision, layer.self_attn.q_proj.weight.data_ptr(), layer.mlp.down_proj.weight.data_ptr())
    made = _FUSED.setdefault(layer, {})
    if key not in made:
        made[key] = _fuse(layer, dtype, pack=pack, precision=precision)
    return made[key]


def _fuse(layer: Any, dtype: torch.dtype, *, pack: bool = False, precision: Precision = "fp32") -> Layer:
    import torch

    attn, mlp = layer.self_attn, layer.mlp

    def weight(module: Any) -> torch.Tensor:
        if getattr(module, "bias", None) is not None:
            raise ValueError("ttsq's decoder expects LLaMA projections without bias (ChatTTS's GPT has none)")
        return module.weight.detach().to(dtype)  # type: ignore[no-any-return]

    def ready(matrix: torch.Tensor) -> Weight:
        return _pack(matrix, precision) if pack else matrix.contiguous()

    return Layer(
        input_norm=layer.input_layernorm.weight.detach(),
        qkv=ready(torch.cat([weight(attn.q_proj), weight(attn.k_proj), weight(attn.v_proj)], 0)),
        out=ready(weight(attn.o_proj)),
        post_norm=layer.post_attention_layernorm.weight.detach(),
        gate_up=ready(torch.cat([weight(mlp.gate_proj), weight(mlp.up_proj)], 0)),
        down=ready(weight(mlp.down_proj)),
        eps=float(layer.input_layernorm.variance_epsilon),
        scale=float(attn.scaling),
    )


def activation(mlp: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch.nn.functional as F

    return F.silu if mlp.config.hidden_act == "silu" else mlp.act_fn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LLaMA's RMSNorm exactly as transformers computes it: in float32, then back to the input's dtype."""
    import torch

    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """torch's one-kernel RMSNorm: the same operations as :func:`rms_norm` when all is float32
    (held bit-equal by the tests), which is the only case it is used for."""
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def per_head(table: torch.Tensor, identity: torch.Tensor, rotated: int, plain: int) -> torch.Tensor:
    """(positions, dim) -> (positions, rotated + plain heads, dim): ``table`` for the first heads, ``identity`` for the rest."""
    import torch

    return torch.cat([table.unsqueeze(1).expand(-1, rotated, -1), identity.unsqueeze(1).expand(-1, plain, -1)], 1).contiguous()


Norm = Callable[["torch.Tensor", "torch.Tensor", float], "torch.Tensor"]


@dataclass(frozen=True)
class Blocks:
    """A LLaMA block's arithmetic around attention, as the decoder runs it for a prefill and for a step alike: the
    queries, keys and values (rotated), and everything after attention. ``norm`` is :func:`rms_norm` or
    :func:`fused_rms_norm`, ``act`` the MLP's activation (:func:`activation`)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    norm: Norm
    act: Callable[[torch.Tensor], torch.Tensor]

    def qkv(self, layer: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys/values of ``x`` ((rows, positions, hidden)), queries and keys rotated:
        (rows, heads, positions, dim) and (rows, 2 x kv heads, positions, dim)."""
        rows, length = x.shape[0], x.shape[1]
        heads = self.num_heads + 2 * self.num_kv_heads
        qkv = linear(self.norm(x, layer.input_norm, layer.eps), layer.qkv)
        if length == 1:  # a decode step: moving the length-1 axis is only a view
            qkv = qkv.view(rows, heads, 1, self.head_dim)
        else:
            qkv = qkv.view(rows, length, heads, self.head_dim).transpose(1, 2)
        qkv = qkv * cos + qkv.roll(self.head_dim // 2, -1) * sin
        return qkv[:, : self.num_heads], qkv[:, self.num_heads :]

    def rest(self, layer: Layer, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Everything after attention: output projection, residual, MLP, residual."""
        rows, length = x.shape[0], x.shape[1]
        flat = attended.view(rows, 1, -1) if length == 1 else attended.transpose(1, 2).reshape(rows, length, -1)
        x = x + linear(flat, layer.out)
        gate, up = linear(self.norm(x, layer.post_norm, layer.eps), layer.gate_up).chunk(2, dim=-1)
        return x + linear(self.act(gate) * up, layer.down)

    def expand(self, kv: torch.Tensor) -> torch.Tensor:
        """Repeat grouped key/value heads to the query heads (a no-op for ChatTTS, which has none)."""
        groups = self.num_heads // self.num_kv_heads
        return kv if groups == 1 else kv.repeat_interleave(groups, dim=1)


def rotary_tables(
    gpt: Any, positions: int, blocks: Blocks, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cos and sin for every position at once, one table per q/k/v head (:meth:`Blocks.qkv` rotates with them):
    the same products and cos/sin as per step (each angle is one multiplication), so a lookup replaces ten kernels per
    step."""
    import torch

    where = torch.arange(positions, device=device).unsqueeze(0)
    probe = torch.zeros(1, 1, int(gpt.config.hidden_size), dtype=dtype, device=device)
    cos, sin = gpt.rotary_emb(probe, where)
    # Values' entries are the identity (cos 1, sin 0: v * 1 + r * 0 == v exactly), so one multiply-add rotates
    # queries and keys and leaves values as they are.
    rotated = blocks.num_heads + blocks.num_kv_heads
    identity = torch.ones_like(cos[0]), torch.zeros_like(sin[0])
    # rotate_half(x) * sin == roll(x, d/2) * (sign * sin), sign -1 on the first half:
    # (-a) * b and a * (-b) are the same float, so this stays bit-equal to transformers.
    sign = torch.ones(blocks.head_dim, dtype=sin.dtype, device=device)
    sign[: blocks.head_dim // 2] = -1
    return (
        per_head(cos[0], identity[0], rotated, blocks.num_kv_heads),
        per_head(sin[0] * sign, identity[1], rotated, blocks.num_kv_heads),
    )
