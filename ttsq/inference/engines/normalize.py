"""Spoken-form text normalization, so that numbers, dates and amounts are read aloud.

ChatTTS 0.2.5 registers no normalizer of its own and silently deletes every character outside
CJK, ASCII letters and a few punctuation marks: "I have 3 apples" is spoken as "I have apples".
WeTextProcessing's finite-state normalizers turn such text into words first ("three",
"二零二六年十一月三十日", "三点五元").

The normalizers would also rewrite ChatTTS's bracketed control tokens (``[laugh_1]`` becomes
``[laugh_一]`` or ``[laugh_ one ]``), so the text is cut around every control token and only the
pieces between them are normalized.

Loading one language's graphs takes about a second and they are immutable afterwards, so each
language is loaded at most once per process and shared by every :class:`TextNormalizer`.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Literal, Protocol

from ttsq.domain.text import CHATTTS_CONTROL_TOKENS

__all__ = ["NormalizationUnavailableError", "TextNormalizer"]

Language = Literal["zh", "en"]

_CONTROL_TOKEN = re.compile("(" + "|".join(re.escape(token) for token in CHATTTS_CONTROL_TOKENS) + ")")

_ZH_FULLWIDTH = str.maketrans({",": "，", ".": "。", "!": "！", "?": "？", ";": "；", ":": "："})
"""The zh normalizer folds sentence punctuation to ASCII; ChatTTS's Chinese training text and
the sentence splitter both expect the full-width forms back."""


class NormalizationUnavailableError(RuntimeError):
    """WeTextProcessing is not installed; switch normalization off in the engine config instead."""


class _Normalizer(Protocol):
    def normalize(self, input: str) -> str: ...


_loaded: dict[Language, _Normalizer] = {}
_load_lock = threading.Lock()
_call_locks: dict[Language, threading.Lock] = {"zh": threading.Lock(), "en": threading.Lock()}


def _load(lang: Language) -> _Normalizer:
    """Load (once per process) the WeTextProcessing normalizer for ``lang``.

    WeTextProcessing sets its ``wetext`` logger to INFO when first imported and then logs graph
    file paths on every load, so the logger is turned down after the import, not before.
    """
    with _load_lock:
        normalizer = _loaded.get(lang)
        if normalizer is None:
            from tn.chinese.normalizer import Normalizer as ChineseNormalizer
            from tn.english.normalizer import Normalizer as EnglishNormalizer

            logging.getLogger("wetext").setLevel(logging.WARNING)
            normalizer = ChineseNormalizer() if lang == "zh" else EnglishNormalizer()
            _loaded[lang] = normalizer
        return normalizer


class TextNormalizer:
    """Rewrite text into its spoken form, leaving ChatTTS control tokens untouched.

    Thread-safe: graphs load lazily under a lock, and each language's calls are serialized
    because pynini's FST objects make no promise about concurrent use.
    """

    def __init__(self) -> None:
        try:
            import tn  # noqa: F401
        except ImportError as exc:
            raise NormalizationUnavailableError(
                "text normalization needs WeTextProcessing (pip install wetextprocessing); "
                "install it or set normalize_text=False in the engine config"
            ) from exc

    def preload(self, langs: tuple[Language, ...] = ("zh", "en")) -> None:
        """Load the graphs now, so the first request in each language does not pay for it."""
        for lang in langs:
            _load(lang)

    def normalize(self, text: str, lang: Language) -> str:
        """Return ``text`` with numbers, dates, amounts and symbols written out as words."""
        if lang not in _call_locks:
            raise ValueError(f"unsupported language {lang!r}; expected 'zh' or 'en'")
        normalizer = _load(lang)
        pieces = _CONTROL_TOKEN.split(text)
        out: list[str] = []
        with _call_locks[lang]:
            for index, piece in enumerate(pieces):
                is_token = index % 2 == 1
                out.append(piece if is_token else _normalize_piece(normalizer, piece, lang))
        return "".join(out)


def _normalize_piece(normalizer: _Normalizer, piece: str, lang: Language) -> str:
    """Normalize text between control tokens, keeping its surrounding whitespace.

    The normalizers trim their input, which would glue English words to a neighbouring token
    ("Hello [uv_break] world" -> "Hello[uv_break]world").
    """
    core = piece.strip()
    if not core:
        return piece
    lead = piece[: len(piece) - len(piece.lstrip())]
    trail = piece[len(piece.rstrip()) :]
    spoken = normalizer.normalize(core)
    if lang == "zh":
        spoken = spoken.translate(_ZH_FULLWIDTH)
    return lead + spoken + trail
