"""What goes into a slot of ttsq's decoder and what comes out: a row's sampling parameters, the decoder's shape, a row
prefilled and a row finished, the seed of a chunk's random stream, and how prompts are grouped to be prefilled together.
:mod:`ttsq.inference.gpt.slot_decoder` decodes with them (and re-exports them)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["PREFILL_PADDING", "DecoderShape", "Finished", "Prefilled", "RowParams", "prefill_groups", "stream_seed"]

PREFILL_PADDING = 1.25
"""Rows prefilled together are padded to their group's longest prompt; a group's padded positions stay within this
factor of its rows' own (:meth:`SlotDecoder.prefill_many`)."""


def stream_seed(seed: int, chunk_index: int) -> int:
    """The seed of one chunk's random stream: the request's seed for its first chunk (so a
    one-chunk request samples exactly as ChatTTS does with ``manual_seed=seed``), and a stable
    hash of (seed, chunk) for the others, so that no two chunks of a request share noise."""
    if chunk_index == 0:
        return seed
    digest = hashlib.blake2b(f"ttsq-stream:{seed}:{chunk_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True)
class RowParams:
    """How one row samples; every field may differ between the rows of one step."""

    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    min_new_token: int
    max_new_token: int
    seed: int
    """The row's stream seed (:func:`stream_seed`)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {self.temperature}")
        if not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be within [0, 1], got {self.top_p}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be a positive number, got {self.repetition_penalty}")
        if not 0 <= self.min_new_token <= self.max_new_token or self.max_new_token < 1:
            raise ValueError(
                f"need 0 <= min_new_token <= max_new_token and max_new_token >= 1, got {self.min_new_token}, {self.max_new_token}"
            )


@dataclass(frozen=True)
class DecoderShape:
    """The static dimensions of one decoder's buffers."""

    slots: int
    max_prompt: int
    """The longest prompt (in positions) a row may bring."""
    max_new: int
    """The most tokens any row may generate (a row's own ``max_new_token`` may be lower)."""

    @property
    def max_len(self) -> int:
        """Positions a row may fill. The cache keeps one more: a row that ended at its limit still
        sits in a step's span until its slot is taken, and writes (garbage) one past its end."""
        return self.max_prompt + self.max_new


@dataclass(frozen=True)
class Prefilled:
    """A row's prompt run through the GPT, not yet in a slot: its keys and values, and its last state."""

    kv: list[torch.Tensor]
    """Per layer: (2 x kv heads, positions, head dim) — keys, then values."""
    hidden: torch.Tensor
    """(1, hidden) float32: the state of the prompt's last position (what the first token is sampled from)."""

    @property
    def length(self) -> int:
        return int(self.kv[0].shape[1])


@dataclass(frozen=True)
class Finished:
    """A row that ended: its slot is free again."""

    slot: int
    tokens: torch.Tensor
    """(n, num_vq) for code rows, (n,) for text rows: the generated tokens without the end token."""
    hiddens: torch.Tensor | None
    """(n, hidden) float32: the GPT state that produced each token (what ChatTTS decodes audio from);
    None for text rows."""
    hit_limit: bool
    """True when the row ran to its ``max_new_token`` without producing the end token."""


def prefill_groups(lengths: Sequence[int], *, alone: bool = False) -> list[list[int]]:
    """Which prompts :meth:`SlotDecoder.prefill_many` runs together: indices of ``lengths``, longest first, each group's
    rows times its longest prompt within :data:`PREFILL_PADDING` of its rows' own positions; every prompt in a group
    of its own with ``alone``."""
    groups: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        group = groups[-1] if groups and not alone else None
        if group is not None and (len(group) + 1) * lengths[group[0]] <= PREFILL_PADDING * (
            sum(lengths[i] for i in group) + lengths[index]
        ):
            group.append(index)
        else:
            groups.append([index])
    return groups
