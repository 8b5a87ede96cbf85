"""A voice draw: many random speakers drawn, the ones least like the existing voices kept.

A speaker seed draws a ChatTTS speaker embedding (a vector: 768 values for the real model, 64 for the tiny one);
two voices sound alike as far as their embeddings are close. A draw of ``n`` therefore draws ``oversample × n``
candidate seeds, has each spoken once (a short preview, which also makes the worker record the embedding it drew:
the API has no model), and keeps the ``n`` whose **nearest existing voice is farthest**, most different first.

The metric is the **Euclidean (L2) distance** between embeddings, decoded as ChatTTS encodes them (float16, LZMA2,
base16384). Euclidean rather than cosine: ChatTTS draws a speaker as ``mean + std × noise`` with one mean for
all, so every embedding shares that offset; a cosine would mostly see the shared mean, a difference cancels it.
"""

from __future__ import annotations

import lzma
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pybase16384 as b14

__all__ = ["Ranked", "rank", "speaker_vector"]

_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


def speaker_vector(embedding: str) -> npt.NDArray[np.float64]:
    """A ChatTTS speaker-embedding string as its vector (``ValueError`` if it is none)."""
    try:
        raw = lzma.decompress(b14.decode_from_string(embedding), format=lzma.FORMAT_RAW, filters=_FILTERS)
    except Exception as exc:
        raise ValueError("not a ChatTTS speaker embedding") from exc
    return np.frombuffer(raw, dtype=np.float16).astype(np.float64)


@dataclass(frozen=True)
class Ranked:
    """A candidate's place: its index among the candidates, the existing voice nearest to it, and how far."""

    index: int
    nearest: str | None
    distance: float | None


def rank(candidates: Sequence[str | None], existing: Mapping[str, str], keep: int) -> list[Ranked]:
    """The ``keep`` candidates (embedding strings; None where none was recorded) farthest from their nearest
    existing voice (name → embedding), farthest first. A candidate without an embedding comes last, unmeasured;
    an existing voice of another dimension (another model's) is not compared."""
    voices = {name: speaker_vector(embedding) for name, embedding in existing.items()}
    ranked: list[Ranked] = []
    for index, embedding in enumerate(candidates):
        if embedding is None:
            ranked.append(Ranked(index, None, None))
            continue
        vector = speaker_vector(embedding)
        distances = {name: float(np.linalg.norm(vector - other)) for name, other in voices.items() if other.shape == vector.shape}
        nearest = min(distances, key=lambda name: distances[name]) if distances else None
        ranked.append(Ranked(index, nearest, distances[nearest] if nearest is not None else None))
    ranked.sort(key=lambda r: (r.distance is None, -(r.distance or 0.0), r.index))
    return ranked[:keep]
