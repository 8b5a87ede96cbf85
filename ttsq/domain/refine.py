"""A refine job's answer: ChatTTS's refined text, kept to what a submit accepts, as the job stores it.

``POST /v1/tts/refine`` runs ChatTTS's refine pass alone (a job of its own: ``TTSParams.refine_only``) so that an
author can read the prosody tokens it would insert, edit them, and submit the edited text. ChatTTS turns the pass's
tokens into text as ``Chat.infer`` does, keeping every control token below ``[break_0]`` (the refine levels and speeds
are dropped): besides the prosody tokens a submit takes (``[uv_break]``, ``[laugh]``, ``[lbreak]``) that range holds
structural ones (``[Sbreak]``, ``[v_break]``, ``[spk_emb]``, ...) that the submit's allow-list refuses
(:func:`ttsq.domain.text.find_forbidden_tokens`). The answer exists to be submitted, so those are removed here: what
is left passes the submit's token check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ttsq.domain.text import find_forbidden_tokens

__all__ = ["REFINED_CONTENT_TYPE", "refined_result", "refined_text", "stored_text"]

REFINED_CONTENT_TYPE = "application/json"
"""How a refine job's result is stored: ``{"text": ...}`` (:func:`refined_result`), the refine route's answer's own
field, so that ``GET /v1/tts/result/{id}`` of a refine task serves it as that route would."""


def refined_text(chunks: Sequence[str]) -> str:
    """A text's refined chunks (in order) as one text a submit accepts: joined by spaces, every control token outside
    the allow-list removed, whitespace collapsed (ChatTTS's tokenizer writes its tokens apart with spaces)."""
    text = " ".join(chunks)
    for token in find_forbidden_tokens(text):
        text = text.replace(token, " ")
    return " ".join(text.split())


def refined_result(text: str) -> bytes:
    """A refine job's stored result: ``{"text": text}`` as UTF-8 JSON."""
    return json.dumps({"text": text}, ensure_ascii=False).encode()


def stored_text(result: bytes) -> str:
    """The refined text of a refine job's stored result (:func:`refined_result`)."""
    text = json.loads(result)["text"]
    if not isinstance(text, str):
        raise ValueError("a refine job's result holds no text")
    return text
