"""Small shared helpers for tests and benchmarks."""

from __future__ import annotations

from submit_api import build_params
from ttsq.jobs import TTSParams
from ttsq.schemas import SubmitRequest
from ttsq.voices import builtin


def params_for(body: SubmitRequest, max_text_chars: int, model_identity: str) -> TTSParams:
    """The job parameters the API would build for ``body`` (its voice, if any, a built-in one)."""
    voice = builtin(body.voice) if body.voice is not None else None
    if body.voice is not None and voice is None:
        raise ValueError(f"{body.voice!r} is not a built-in voice")
    return build_params(body, max_text_chars, model_identity, voice)
