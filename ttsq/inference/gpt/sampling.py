"""ChatTTS's sampling warpers for rows that each have their own: which tokens top-p then top-k remove from a row's
logits, computed as ChatTTS 0.2.5 computes them (a full sort), or, on a CPU, from a top-k selection whose result is
the sort's, bit for bit. :class:`~ttsq.inference.gpt.slot_decoder.SlotDecoder` samples with them; every argument is a
slice of its per-slot tensors, one row per slot of the step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_TOKENS_TO_KEEP", "PENALTY_WINDOW", "filtered_by_selection", "filtered_by_sort"]

MIN_TOKENS_TO_KEEP = 3
"""ChatTTS builds its top-p and top-k warpers with ``min_tokens_to_keep=3``: a top_k of 1 keeps 3."""
PENALTY_WINDOW = 16
"""ChatTTS's repetition penalty counts the last 16 generated tokens."""
_CUMULATIVE_ERROR_BOUND = 1e-4
"""How far ChatTTS's float32 top-p sums may be from the exact ones: each of up to 626 sequential
float32 additions rounds by at most 2^-24 of a sum below 1 (3.7e-5 in all), and the softmax's
own rounding adds about a millionth. Decisions nearer the threshold than this go to the full sort."""


def filtered_by_sort(logits: torch.Tensor, top_p_floor: torch.Tensor, kth: torch.Tensor) -> torch.Tensor:
    """Which tokens top-p then top-k remove, computed exactly as ChatTTS's warpers do (a full sort).

    ``logits`` (rows, streams, vocab); ``top_p_floor`` each row's ``1 - top_p`` (rows, 1, 1); ``kth`` where each row's
    k-th largest logit sits in ascending order, ``vocab - max(top_k, 3)`` (rows, streams, 1)."""
    import torch

    ascending, order = torch.sort(logits, dim=-1)
    dropped = ascending.softmax(dim=-1).cumsum(dim=-1) <= top_p_floor
    dropped[..., -MIN_TOKENS_TO_KEEP:] = False
    # Top-k on what top-p kept: top-p drops a prefix of the ascending order, so the k-th
    # largest survivor is ascending[vocab - k] unless top-p dropped that one too (then top-k drops nothing).
    floor = torch.where(dropped.gather(-1, kth), -math.inf, ascending.gather(-1, kth))
    removed: torch.Tensor = dropped.scatter(-1, order, dropped) | (logits < floor)
    return removed


def filtered_by_selection(
    logits: torch.Tensor,
    *,
    top_k: int,
    top_p_floor: torch.Tensor,
    top_p_floor64: torch.Tensor,
    kth: torch.Tensor,
    within_top_k: torch.Tensor,
    decided: torch.Tensor,
    always_kept: torch.Tensor,
) -> torch.Tensor:
    """The same tokens as :func:`filtered_by_sort`, from a top-k selection instead of a full sort.

    A full sort of 626 logits costs ~30 us per row and stream on a CPU (4x a top-21 selection, and more than the rest
    of a tiny model's step). Only the ``k`` best tokens can survive top-k, so only their top-p fate matters: token
    of rank ``r`` is dropped when the probability of everything ranked below it and itself, ``1 - P(ranks < r)``, is
    at most ``1 - top_p``. That sum is computed here in float64; ChatTTS's float32 softmax and sequential cumulative sum
    differ from it by less than :data:`_CUMULATIVE_ERROR_BOUND`, so a decision further than that from the threshold is
    ChatTTS's decision. Rows with a decision closer than that, or with equal logits at the cut (where the sort's tie
    order decides), are computed by the full sort instead: the result is always the sort's, bit for bit.

    ``top_k`` is the largest effective top-k of the rows; ``top_p_floor64`` is ``top_p_floor`` in float64 (computed on
    the host); by rank, ``within_top_k`` says whether top-k keeps it, ``decided`` whether the row's top-p decision there
    can change the result (3 <= rank < top-k) and ``always_kept`` whether it is kept whatever top-p says (rank < 3).
    """
    import torch

    vocab = logits.shape[-1]
    keep_most = min(vocab, top_k + 1)
    best, where = torch.topk(logits, keep_most, dim=-1)
    weights = torch.exp((logits - best[..., :1]).double())
    ranked = weights.gather(-1, where)
    total = weights.sum(-1, keepdim=True)
    # For rank r: 1 - P(ranks < r), the share of the sorted cumulative sum ChatTTS compares.
    remainder = (total - (ranked.cumsum(-1) - ranked)) / total
    kept = ~(remainder <= top_p_floor64) | always_kept[:keep_most]
    kept &= within_top_k[:, :, :keep_most]
    removed = torch.ones_like(logits, dtype=torch.bool).scatter_(-1, where, ~kept)
    close = ((remainder - top_p_floor64).abs() < _CUMULATIVE_ERROR_BOUND) & decided[:, :, :keep_most]
    tied = best[..., 1:] == best[..., :-1]
    if bool(close.any() | tied.any()):  # one host read for both
        unsure = close.any(dim=-1).any(dim=-1) | tied.any(dim=-1).any(dim=-1)
        for row in unsure.nonzero().view(-1).tolist():
            one = slice(row, row + 1)
            removed[one] = filtered_by_sort(logits[one], top_p_floor[one], kth[one])
    return removed
