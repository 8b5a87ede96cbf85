"""Named voices: a name fixes the speaker, in every worker process.

A voice is either a speaker *seed* (``torch.manual_seed``-style draw of ChatTTS's random
speaker; the engine draws it the same way on every device, so a name sounds the same everywhere
for a given checkpoint) or a ChatTTS speaker-embedding string. Built-in voices are seeds and
cannot be changed; user voices are kept by :class:`ttsq.store.voices.VoiceRegistry` in Redis.
"""

from __future__ import annotations

import lzma
import math
import re
from typing import Literal

import numpy as np
import pybase16384 as b14
from pydantic import BaseModel, Field

from ttsq.domain.blends import BlendPart

VoiceKind = Literal["builtin", "seed", "embedding", "reference", "blend"]
VOICE_NAME = re.compile(r"^(?!draw$)[A-Za-z0-9_-]{1,64}$")
"""A voice's name; not ``draw``, which ``/v1/voices/draw`` (voice draws) names."""

BUILTIN_VOICES: dict[str, int] = {
    "zh_female": 2,
    "zh_male": 1111,
}
"""Built-in voice name → speaker seed."""

OPENAI_VOICES: dict[str, str] = {
    "alloy": "zh_female",
    "ash": "zh_male",
    "ballad": "zh_male",
    "coral": "zh_female",
    "echo": "zh_male",
    "fable": "zh_male",
    "nova": "zh_female",
    "onyx": "zh_male",
    "sage": "zh_female",
    "shimmer": "zh_female",
    "verse": "zh_male",
    "marin": "zh_female",
    "cedar": "zh_male",
}
"""OpenAI's voice names, mapped onto built-in voices for the OpenAI-compatible endpoint."""

_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


class Voice(BaseModel):
    name: str
    kind: VoiceKind
    builtin: bool = False
    seed: int | None = Field(None, description="Speaker seed (built-in and seed voices).")
    embedding: str | None = Field(None, description="ChatTTS speaker-embedding string (embedding voices).")
    prompt: str | None = Field(
        None, description="ChatTTS speaker prompt (`sample_audio_speaker`: a recording's DVAE codes; reference voices)."
    )
    transcript: str | None = Field(None, description="What the reference recording says (reference voices).")
    components: list[BlendPart] | None = Field(
        None, description="The voices a blend mixes, resolved to seeds or embeddings, with their weights (blends)."
    )
    created_at: float | None = None
    owner: str | None = Field(
        None,
        description="Whose voice it is: `tenant:NAME` or `key:ID` (that tenant's keys alone see and use it); "
        "null: global (built-in voices and an admin's shared catalogue, seen by every tenant).",
    )

    def for_tts_key(self) -> Voice:
        """The voice as a caller without the ``admin`` scope may see it: without what makes its speaker (a reference
        voice's prompt is a compressed encoding of a person's recording, and its transcript what they said; an
        embedding, in a voice or a blend's components, is the speaker itself), which only admins are shown."""
        parts = None if self.components is None else [part.model_copy(update={"embedding": None}) for part in self.components]
        return self.model_copy(update={"embedding": None, "prompt": None, "transcript": None, "components": parts})


class VoiceError(ValueError):
    """A voice request that cannot be honoured; ``status`` is the HTTP status that fits."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def validate_voice_name(name: str) -> str:
    if name == "draw":
        raise ValueError("'draw' is not a voice name: /v1/voices/draw draws voices")
    if not VOICE_NAME.fullmatch(name):
        raise ValueError("a voice name is 1-64 letters, digits, '_' or '-'")
    return name


def speaker_dimension(embedding: str) -> int:
    """Decode a ChatTTS speaker-embedding string and return its dimension, or raise ValueError.

    ChatTTS encodes a float16 vector, LZMA2-compressed, as base16384 text. Anything that does not
    decode to finite float16 values is refused here, before it can reach a worker.
    """
    try:
        raw = lzma.decompress(b14.decode_from_string(embedding), format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    except Exception as exc:
        raise ValueError("not a ChatTTS speaker embedding (base16384 + LZMA2 float16 vector)") from exc
    if not raw or len(raw) % 2:
        raise ValueError("the speaker embedding is empty or truncated")
    vector = np.frombuffer(raw, dtype=np.float16)
    if not all(math.isfinite(float(v)) for v in vector):
        raise ValueError("the speaker embedding holds non-finite values")
    return int(vector.size)


def builtin(name: str) -> Voice | None:
    seed = BUILTIN_VOICES.get(name)
    return None if seed is None else Voice(name=name, kind="builtin", builtin=True, seed=seed)
