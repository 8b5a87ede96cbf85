"""The sampling parameters: how ChatTTS draws a request's audio, beyond its text, speaker and seed.

One record, :class:`Sampling`, and the one home of each parameter's default and bounds. Everything
that carries the parameters takes them from here: the request body (``ttsq.api.schemas``) and the
stored job (:class:`ttsq.domain.jobs.TTSParams`) inherit :class:`SamplingFields`, so clients send and
Redis stores the same flat fields as before; the engine request holds a :class:`Sampling`; the batch
key and the cache key take the whole record, so a parameter added here is grouped on and keyed on
without another edit.

The sampling *seed* is not one of them: it is drawn per request, and requests that differ only in
their seed share a ChatTTS call (see :func:`ttsq.domain.batching.batch_key`).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_SAMPLING", "MAX_SPEED", "MIN_SPEED", "SAMPLING_FIELDS", "Sampling", "SamplingFields", "speed_level"]

# ChatTTS's ``[speed_N]`` prompt, as the API offers it: 1 (slow) to 9 (fast).
MIN_SPEED = 1
MAX_SPEED = 9


class SamplingFields(BaseModel):
    """The sampling parameters as fields, with their defaults and bounds: inherited by the models that
    carry them flat (the submit body, the stored job), so that each is declared once and the wire and
    stored shapes stay what they have always been. ``.sampling`` is the record alone."""

    speed: int = Field(5, ge=MIN_SPEED, le=MAX_SPEED, description=f"ChatTTS speed {MIN_SPEED} (slow) to {MAX_SPEED} (fast).")
    temperature: float = Field(0.3, ge=0.01, le=1.0)
    top_p: float = Field(0.7, ge=0.1, le=1.0)
    top_k: int = Field(20, ge=1, le=100)
    refine_text: bool = Field(False, description="Let ChatTTS add oral prosody tokens first (slower).")

    @property
    def sampling(self) -> Sampling:
        """These parameters alone, as one value (what a batch shares, what the engine is handed).

        The values were validated when this model was (or come from the API, which validated them), so
        they are not validated again.
        """
        return Sampling.model_construct(**{name: getattr(self, name) for name in SAMPLING_FIELDS})


class Sampling(SamplingFields):
    """How ChatTTS samples one request: speed, temperature, top-p, top-k, and whether it refines the text first.

    A frozen pydantic model rather than a dataclass: the bounds must reach the OpenAPI document and be
    enforced on every body that carries them, which pydantic's ``Field`` constraints do and a dataclass's
    fields cannot; the request body and the stored job are pydantic models that inherit the declarations
    (:class:`SamplingFields`) so that neither shape changes; and frozen makes it a hashable value, which
    is what a batch key needs. It costs the domain no new dependency (the job record is pydantic already).
    """

    model_config = ConfigDict(frozen=True)

    @property
    def sampling(self) -> Sampling:
        return self


SAMPLING_FIELDS: tuple[str, ...] = tuple(SamplingFields.model_fields)
"""The parameters' names, as clients send them and jobs store them."""

DEFAULT_SAMPLING = Sampling()
"""What a request that names no sampling parameter gets."""


def speed_level(factor: float) -> int:
    """A speed *factor* (1.0 the normal pace, 2.0 twice as fast: OpenAI's ``speed``, Cartesia's
    ``generation_config.speed``, Google's ``speakingRate``) as ChatTTS's ``[speed_N]``: each doubling is two steps from
    the default, clamped to the levels there are (0.25 → 1, 0.5 → 3, 1 → 5, 2 → 7, 4 → 9). One rule for every protocol
    that speaks in factors, so the same factor is the same speed whichever route it came by."""
    return max(MIN_SPEED, min(MAX_SPEED, round(DEFAULT_SAMPLING.speed + 2 * math.log2(factor))))
