"""Blends: one voice made of several voices with weights, in ChatTTS's speaker-embedding space.

ChatTTS draws a random speaker as ``mean + std * N(0, 1)``, one independent normal per dimension, from the
checkpoint's ``spk_stat`` (``Speaker._sample_random``); the GPT then sees the embedding L2-normalised
(``Speaker.apply``). So the space ChatTTS actually samples from is the *standardised* one, ``z = (e - mean) / std``,
where every voice it ever drew is a standard normal vector. The blend rule (:func:`blend_embedding`) works there:

1. standardise each component: ``z_i = (e_i - mean) / std``;
2. take the weighted sum with weights normalised to sum to 1: ``z = sum(w_i * z_i)``;
3. rescale to a draw's variance: ``z /= sqrt(sum(w_i ** 2))`` — for independent standard normal ``z_i`` the sum has
   variance ``sum(w_i ** 2)``, so the result is distributed exactly like one more draw;
4. back to the embedding: ``e = mean + std * z``, stored as float16 as ChatTTS stores every embedding.

Why not a plain average of the embeddings: the average of two draws has variance ½ per dimension, so it sits nearer
the mean speaker than any voice ChatTTS would draw (averages of many voices converge to one bland voice), and, since
the model only sees the normalised direction, that shrink changes the voice, not just its scale. Step 3 keeps a blend
a plausible draw; a blend with weights 1 and ~0 stays the first voice.

Everything here is pure numpy and deterministic: the same components and weights give the same bits on every
device. What the components are is resolved in the API (:class:`BlendPart`: a seed or an embedding, never a name),
so a blend does not change when a component voice is later deleted or re-created; the embedding itself is computed
by the worker (:meth:`ttsq.inference.base.Engine.blend_speakers`), which is where seeds are drawn (torch's generator)
and where the checkpoint's ``spk_stat`` is.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MAX_BLEND_COMPONENTS",
    "BlendError",
    "BlendPart",
    "blend_embedding",
    "blend_parts",
    "blend_weights",
    "is_blend",
    "parse_blend",
]

MAX_BLEND_COMPONENTS = 8
"""The most voices one blend mixes (beyond a few, every blend sounds like a fresh random draw anyway)."""

_TERM = re.compile(r"^\s*(?P<name>[^*\s]+)\s*(?:\*\s*(?P<weight>[^*\s]+)\s*)?$")


class BlendError(ValueError):
    """A blend that cannot be made; the message names the problem."""


class BlendPart(BaseModel):
    """One component of a blend, resolved: the voice's name (for people) and what makes its embedding (for the model).

    Exactly one of ``seed`` and ``embedding`` is set: blending takes voices that are points of the embedding space."""

    model_config = ConfigDict(frozen=True)

    voice: str = Field(description="The component voice's name when the blend was made.")
    weight: float = Field(description="Its weight, normalised: a blend's weights sum to 1.")
    seed: int | None = Field(None, description="The speaker seed the worker draws the component from.")
    embedding: str | None = Field(None, description="The component's ChatTTS speaker embedding.")

    @property
    def identity(self) -> str:
        """What makes the component's embedding (the cache key's view of it, and the blend's canonical order)."""
        if self.embedding is not None:
            return "emb:" + hashlib.sha256(self.embedding.encode()).hexdigest()
        return f"seed:{self.seed}"


def is_blend(voice: str) -> bool:
    """``voice`` is a blend expression (``"a*0.7+b*0.3"``), not a name (names never hold ``*`` or ``+``)."""
    return "*" in voice or "+" in voice


def parse_blend(expression: str) -> list[tuple[str, float]]:
    """``"zh_female*0.7+narrator*0.3"`` → ``[("zh_female", 0.7), ("narrator", 0.3)]``; a term without ``*w`` weighs 1.

    Weights are checked by :func:`blend_weights`; names are looked up by the caller."""
    terms: list[tuple[str, float]] = []
    for term in expression.split("+"):
        match = _TERM.match(term)
        if match is None:
            raise BlendError(f"{term.strip()!r} is not a blend term: write voice*weight, joined by '+'")
        raw = match.group("weight")
        try:
            weight = 1.0 if raw is None else float(raw)
        except ValueError:
            raise BlendError(f"the weight {raw!r} of {match.group('name')!r} is not a number") from None
        terms.append((match.group("name"), weight))
    blend_weights([weight for _, weight in terms], [name for name, _ in terms])
    return terms


def blend_weights(weights: Sequence[float], names: Sequence[str]) -> list[float]:
    """The weights normalised to sum to 1, or :class:`BlendError`: 2 to :data:`MAX_BLEND_COMPONENTS` positive,
    finite weights, one per distinct voice."""
    if not 2 <= len(weights) <= MAX_BLEND_COMPONENTS:
        raise BlendError(f"a blend mixes 2 to {MAX_BLEND_COMPONENTS} voices, not {len(weights)}")
    for name, weight in zip(names, weights, strict=True):
        if not math.isfinite(weight) or weight <= 0:
            raise BlendError(f"the weight of {name!r} must be a positive finite number, got {weight!r}")
    repeated = sorted({name for name in names if list(names).count(name) > 1})
    if repeated:
        raise BlendError(f"{', '.join(map(repr, repeated))} appears more than once in the blend")
    try:
        total = math.fsum(weights)
    except OverflowError:  # finite weights near float's largest ("a*1e308+b*1e308"): their sum is not, their ratio is
        largest = max(weights)
        weights = [weight / largest for weight in weights]
        total = math.fsum(weights)
    return [weight / total for weight in weights]


class Component(Protocol):
    """What a blend needs of a voice (:class:`ttsq.domain.voices.Voice` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def embedding(self) -> str | None: ...


def blend_parts(terms: Sequence[tuple[Component, float]]) -> list[BlendPart]:
    """The resolved components of a blend of ``terms`` (voice, weight): weights normalised, in canonical order
    (by identity, so the order a caller wrote them in changes neither the embedding's bits nor the cache key).

    Only voices that are points of the embedding space blend: seeds (built-in voices too) and embeddings. A
    reference voice is a recording's codes read before the text, not a point there, and averaging two prompts has no
    meaning, so it is refused; so is a blend inside a blend (write its components out instead)."""
    for voice, _ in terms:
        if voice.kind == "reference":
            raise BlendError(f"{voice.name!r} is a voice from a recording: only seed and embedding voices can be blended")
        if voice.kind == "blend" or (voice.seed is None) == (voice.embedding is None):
            raise BlendError(f"{voice.name!r} is a blend itself: blend its components instead")
    weights = blend_weights([weight for _, weight in terms], [voice.name for voice, _ in terms])
    parts = [
        BlendPart(voice=voice.name, weight=weight, seed=voice.seed, embedding=voice.embedding)
        for (voice, _), weight in zip(terms, weights, strict=True)
    ]
    identities = [part.identity for part in parts]
    same = sorted({part.voice for part in parts if identities.count(part.identity) > 1})
    if same:
        raise BlendError(f"{' and '.join(map(repr, same))} are the same voice: blend distinct voices")
    return sorted(parts, key=lambda part: part.identity)


def blend_embedding(
    vectors: Sequence[npt.NDArray[np.floating]],
    weights: Sequence[float],
    mean: npt.NDArray[np.floating],
    std: npt.NDArray[np.floating],
) -> npt.NDArray[np.float16]:
    """The blend of speaker embeddings ``vectors`` by ``weights`` under the rule of this module, as float16.

    ``mean``/``std`` are the checkpoint's ``spk_stat``. Computed in float64, components summed in the order given
    (the API gives them in a canonical order), so it is bit-for-bit reproducible. A dimension whose ``std`` is 0
    (no spread to standardise) keeps the mean."""
    if len(vectors) != len(weights) or not vectors:
        raise BlendError("a blend needs one weight per component")
    center = np.asarray(mean, dtype=np.float64)
    spread = np.asarray(std, dtype=np.float64)
    if any(np.shape(vector) != center.shape for vector in vectors):
        raise BlendError(f"every component must have this model's {center.size} speaker dimensions")
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    scale = np.where(spread > 0, spread, 1.0)
    z = np.zeros_like(center)
    for weight, vector in zip(w, vectors, strict=True):
        z += weight * ((np.asarray(vector, dtype=np.float64) - center) / scale)
    z /= math.sqrt(float(np.sum(w * w)))
    blended: npt.NDArray[np.float16] = (center + np.where(spread > 0, spread, 0.0) * z).astype(np.float16)
    return blended
