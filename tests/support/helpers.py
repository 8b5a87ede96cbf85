"""Small shared helpers for tests."""

from __future__ import annotations

from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import build_params
from ttsq.domain.jobs import TTSParams
from ttsq.domain.voices import builtin


def params_for(body: SubmitRequest, max_text_chars: int, model_identity: str) -> TTSParams:
    """The job parameters the API would build for ``body`` (its voice, if any, a built-in one)."""
    voice = builtin(body.voice) if body.voice is not None else None
    if body.voice is not None and voice is None:
        raise ValueError(f"{body.voice!r} is not a built-in voice")
    return build_params(body, voice, max_text_chars=max_text_chars, model_identity=model_identity)
