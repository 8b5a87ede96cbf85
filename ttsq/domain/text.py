"""Input text cleaning, validation and splitting for ChatTTS.

Text reaches the model straight from API callers, so it is checked here before it costs any
GPU time. Three things matter:

* Invisible characters (zero-width spaces, BOMs, bidi marks, stray control bytes pasted from
  documents) are read aloud as noise or silently change tokenisation, so they are removed.
* ChatTTS steers itself with bracketed control tokens. The prosody ones (``[uv_break]``,
  ``[laugh]``, ...) are a feature callers may use; the structural ones (``[Stts]``,
  ``[spk_emb]``, ``[speed_5]``, ...) let a caller hijack the prompt format, so they are refused.
* Long text is split into sentence-sized chunks, because ChatTTS degrades (and eventually
  truncates) on long inputs, and one inference call per chunk keeps memory bounded.

This module must stay importable without torch: the API process validates text with it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Literal

__all__ = [
    "ALLOWED_TOKEN_DESCRIPTION",
    "CHATTTS_CONTROL_TOKENS",
    "CHATTTS_HALF_TO_FULL",
    "CHATTTS_SIMPLIFIER",
    "DIGIT_SPOKEN_CHARS",
    "TextError",
    "canonical_text",
    "clean_text",
    "detect_language",
    "find_forbidden_tokens",
    "fold_width",
    "model_view",
    "split_sentences",
    "spoken_length",
    "validate_text",
]


class TextError(ValueError):
    """Raised with a message a person understands, so the API can return it verbatim.

    Example: ``text contains the ChatTTS control token [Stts], which is not allowed;
    allowed tokens: [uv_break], [laugh], [lbreak], [break_0..7], [laugh_0..2], [oral_0..9]``.
    """


OPENAI_MAX_INPUT_CHARS = 4096
"""OpenAI's own limit on ``input`` of ``/v1/audio/speech``: the default of ``OPENAI_MAX_INPUT_CHARS``, so a client
written against OpenAI is not refused a text OpenAI would take. A long text is split into sentence chunks like any
other (:func:`split_sentences`), so its length costs synthesis time, not a bigger model call."""

ALLOWED_TOKEN_DESCRIPTION = "[uv_break], [laugh], [lbreak], [break_0..7], [laugh_0..2], [oral_0..9]"
"""The prosody-token allow list, worded for error messages and API documentation."""

CHATTTS_CONTROL_TOKENS: tuple[str, ...] = (
    "[Sasr]",
    "[Pasr]",
    "[Easr]",
    "[Stts]",
    "[Ptts]",
    "[Etts]",
    "[Sbreak]",
    "[Pbreak]",
    "[Ebreak]",
    "[uv_break]",
    "[v_break]",
    "[lbreak]",
    "[llbreak]",
    "[undefine]",
    "[laugh]",
    "[spk_emb]",
    "[empty_spk]",
    "[music]",
    "[pure]",
    *(f"[break_{n}]" for n in range(8)),
    *(f"[laugh_{n}]" for n in range(3)),
    *(f"[oral_{n}]" for n in range(10)),
    *(f"[speed_{n}]" for n in range(10)),
)
"""The 50 control tokens of the ChatTTS tokenizer, in the order the tokenizer adds them.

Only these exact spellings are protected from normalization: other bracketed text such as a
citation "[2]" is ordinary text whose digits must still be spoken.
"""

_ALLOWED_TOKENS: frozenset[str] = frozenset(
    ["uv_break", "laugh", "lbreak"]
    + [f"break_{n}" for n in range(8)]
    + [f"laugh_{n}" for n in range(3)]
    + [f"oral_{n}" for n in range(10)]
)
"""The prosody tokens callers may use (names without brackets)."""

_FORBIDDEN_NAMES: frozenset[str] = frozenset(token[1:-1].lower() for token in CHATTTS_CONTROL_TOKENS) - _ALLOWED_TOKENS
"""Every other control token, lower-cased so that case variants are caught too."""

_NUMBERED_FAMILY = re.compile(r"(?:break|laugh|oral|speed)_\d+", re.IGNORECASE)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_ATOMIC_TOKEN = re.compile(r"\[[A-Za-z0-9_]+\]")
WHITESPACE_RUN = re.compile(r"\s+")
_CJK_IDEOGRAPH = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0002ebef\U00030000-\U0003134f]")

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})

CLOSERS = "\"'”’」』）)》】"
_SENTENCE_END = re.compile(f"[。！？；…!?;.]+[{re.escape(CLOSERS)}]*")
_CLAUSE_END = re.compile(r"[，、,：:]+")
MIN_SPLIT_CHARS = 8
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(raw: str) -> str:
    """Remove characters that are invisible to the person but not to the model.

    Whitespace control characters (tabs, newlines) become spaces rather than vanishing so
    that words on either side of a line break stay apart. Nothing visible is altered: no
    NFKC folding, because it would turn full-width punctuation that ChatTTS handles itself
    into ASCII and change how numbers like "²" are read.
    """
    if raw.isprintable():  # the usual case: no C* character, and no whitespace but " " (str.isprintable's definition)
        return " ".join(raw.split())
    kept = []
    for char in raw:
        if char.isspace():
            kept.append(" ")
        elif unicodedata.category(char) not in _INVISIBLE_CATEGORIES:
            kept.append(char)
    return WHITESPACE_RUN.sub(" ", "".join(kept)).strip()


def fold_width(text: str) -> str:
    """Fold full-width and half-width compatibility forms to their ordinary characters.

    Only characters whose Unicode decomposition is tagged ``<wide>`` or ``<narrow>`` change:
    ``Ｈｅｌｌｏ`` → ``Hello``, ``，`` → ``,``, the ideographic space → a space, half-width katakana
    → katakana. They read the same aloud, so folding them lets the cache treat such variants
    as one request, and it stops ``［Stts］`` from slipping past the control-token check.
    Everything else NFKC would touch (``²``, ``①``, ligatures) is left alone, since it may be
    read differently.
    """
    return text if text.isascii() else text.translate(_WIDTH_TABLE)


WIDTH_FORM_CODE_POINTS = (0x3000, *range(0xFF00, 0x10000))
"""Where Unicode keeps every character whose decomposition is ``<wide>`` or ``<narrow>``: the ideographic
space and the Halfwidth and Fullwidth Forms block (a test checks every code point of the running Unicode)."""
_WIDTH_TABLE = {
    code: unicodedata.normalize("NFKC", chr(code))
    for code in WIDTH_FORM_CODE_POINTS
    if unicodedata.decomposition(chr(code)).startswith(("<wide>", "<narrow>"))
}


# ---- the model's view of a text ----------------------------------------------------------------
# ChatTTS 0.2.5 (ChatTTS/norm.py, AGPL-3.0, by 2noise) rewrites punctuation before its tokenizer sees
# it: for Chinese, half-width marks become full-width; then every mark in its "simplifier" table
# becomes a comma or a full stop. The two tables below are copied from that file (a test checks them
# against the installed package). Its BERT tokenizer then ignores whitespace next to a CJK character
# or a punctuation mark. canonical_text() applies the same rewriting, so texts that the model cannot
# tell apart become one text — one engine input, one cache key.

CHATTTS_HALF_TO_FULL: dict[str, str] = {
    "!": "！", '"': "“", "'": "‘", "#": "＃", "$": "＄", "%": "％", "&": "＆", "(": "（", ")": "）", ",": "，",
    "-": "－", "*": "＊", "+": "＋", ".": "。", "/": "／", ":": "：", ";": "；", "<": "＜", "=": "＝", ">": "＞",
    "?": "？", "@": "＠", "\\": "＼", "^": "＾", "`": "｀", "{": "｛", "|": "｜", "}": "｝", "~": "～",
}  # fmt: skip
"""ChatTTS's ``Normalizer.halfwidth_2_fullwidth``, applied to Chinese text."""

CHATTTS_SIMPLIFIER: dict[str, str] = {
    "：": "，", "；": "，", "！": "。", "（": "，", "）": "，", "【": "，", "】": "，", "『": "，", "』": "，",
    "「": "，", "」": "，", "《": "，", "》": "，", "－": "，", ":": ",", ";": ",", "!": ".", "(": ",", ")": ",",
    ">": ",", "<": ",", "-": ",",
}  # fmt: skip
"""ChatTTS's ``Normalizer.character_simplifier``: marks it cannot speak, folded into the ones it can."""

_HALF_TO_FULL_TABLE = str.maketrans(CHATTTS_HALF_TO_FULL)
_SIMPLIFIER_TABLE = str.maketrans(CHATTTS_SIMPLIFIER)
_EN_MAPPABLE = re.compile("[" + re.escape("".join(CHATTTS_SIMPLIFIER)) + "]")
_ZH_MAPPABLE = re.compile("[" + re.escape("".join(CHATTTS_SIMPLIFIER) + "".join(CHATTTS_HALF_TO_FULL)) + "]")
_INNER_SPACE = re.compile(r"(?<![A-Za-z]) (?=.)|(?<=[A-Za-z]) (?=[^A-Za-z])", re.DOTALL)
"""A space with a character after it (whitespace is already collapsed to single spaces) — except between two ASCII
letters, the commonest case, which always stays (so it costs no Python call)."""
_CHATTTS_TAG = re.compile(r"(\[[\w_]+\])")
"""What ChatTTS's normalizer leaves alone: bracketed tags such as ``[uv_break]``."""


def _is_bert_cjk(char: str) -> bool:
    """BERT's ``_is_chinese_char``: the ideograph blocks its pre-tokenizer splits into single tokens."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


_SEPARATORS = frozenset(",.!?;:、，。！？；：…")
"""Marks a space before which the tokenizer ignores and nothing else reads: "word ," is "word,"."""

_FULL_WIDTH_SEPARATORS = frozenset("、，。！？；：…")
"""Chinese marks: a space after them is ignored too (only after ASCII "." does the splitter look at it)."""


def _space_before_is_ignored(char: str) -> bool:
    """A separator or a closing bracket: "hello ." and "hello." are the same tokens.

    Square brackets are the exception: the tokenizer matches control tokens such as ``[laugh]`` on
    the raw text, so "[ laugh ]" (punctuation and a word) and "[laugh]" (one token) differ.
    """
    return char in _SEPARATORS or (unicodedata.category(char) == "Pe" and char != "]")


def _space_after_is_ignored(char: str) -> bool:
    """An opening bracket other than "[", or a Chinese mark: "( hello" is "(hello", "你好， a" is "你好，a"."""
    return char in _FULL_WIDTH_SEPARATORS or (unicodedata.category(char) == "Ps" and char != "[")


def _map_punctuation(text: str, chinese: bool) -> str:
    """Rewrite punctuation as ChatTTS does, except next to a digit: the number normalizer runs first
    in the worker and reads "3.5", "10:30", "1,000" or "-5" as numbers."""
    mappable = _ZH_MAPPABLE if chinese else _EN_MAPPABLE
    return mappable.sub(lambda match: _mapped(match, chinese), text)


def _mapped(match: re.Match[str], chinese: bool) -> str:
    text, index, char = match.string, match.start(), match.group()
    if (index and text[index - 1].isdigit()) or text[index + 1 : index + 2].isdigit():
        return char
    if chinese:
        char = char.translate(_HALF_TO_FULL_TABLE)
    return char.translate(_SIMPLIFIER_TABLE)


def _drop_ignored_spaces(text: str) -> str:
    """Remove the spaces the tokenizer ignores and nothing before it reads: next to a CJK character,
    before a separator or closing bracket, after an opening bracket.

    Spaces next to a digit stay (the number normalizer reads "3 5" and "35" differently); so do
    spaces around symbols such as "$" or "&", which it may speak; and so does the space after a
    mark before a word, which the sentence splitter uses to tell "e.g." from the end of a sentence.
    """
    return _INNER_SPACE.sub(_kept_space, text)


def _kept_space(match: re.Match[str]) -> str:
    """The space ``match`` found, or nothing where the tokenizer ignores it."""
    start = match.start()
    before, after = match.string[start - 1 : start], match.string[start + 1 : start + 2]
    if not before or not after:  # at an end (clean text has no space there)
        return " "
    if not (before.isdigit() or after.isdigit()) and (
        _is_bert_cjk(before) or _is_bert_cjk(after) or _space_before_is_ignored(after) or _space_after_is_ignored(before)
    ):
        return ""
    return " "


def model_view(text: str) -> str:
    """``text`` (already clean) as ChatTTS will read it: its punctuation rewriting, and no spaces its
    tokenizer ignores. Bracketed tags are left as they are. Letter case and characters that ChatTTS
    deletes (quotes, "?", "…") are kept: the number normalizer and the sentence splitter still use them."""
    chinese = detect_language(text) == "zh"
    pieces = _CHATTTS_TAG.split(_drop_ignored_spaces(text))
    mapped = "".join(piece if index % 2 else _map_punctuation(piece, chinese) for index, piece in enumerate(pieces))
    # Once more: a mark may have become a separator ("(" -> ","), and the space before it is now ignored.
    return _drop_ignored_spaces(mapped)


def canonical_text(raw: str) -> str:
    """What the engine receives, and what the cache key is made of: width-folded, invisible characters
    removed, whitespace collapsed, then :func:`model_view`.

    Two inputs with the same canonical text are the same request (and share a cache entry); two
    inputs that ChatTTS turns into the same tokens have the same canonical text, within the limits
    :func:`model_view` names.
    """
    return model_view(clean_text(fold_width(raw)))


def _is_forbidden(name: str) -> bool:
    """Decide whether a bracketed name would act as (or imitate) a structural ChatTTS token.

    The tokenizer matches case-sensitively, so the exact allowed spellings are accepted. A
    case variant of a forbidden token is refused anyway, so that a tokenizer or normaliser
    change upstream can never turn it into a live control token. Case variants of allowed
    tokens (``[Laugh]``) are neither: they are ordinary text to the tokenizer.
    """
    if name in _ALLOWED_TOKENS:
        return False
    lowered = name.lower()
    if lowered in _ALLOWED_TOKENS:
        return False
    return lowered in _FORBIDDEN_NAMES or _NUMBERED_FAMILY.fullmatch(name) is not None


def find_forbidden_tokens(text: str) -> list[str]:
    """List the forbidden control tokens in ``text``, each once, in order of appearance.

    Tokens are returned with their brackets and original spelling so that error messages
    quote exactly what the caller sent. Ordinary bracketed text such as ``[note]`` or
    ``[1]`` is not a control token and is ignored.
    """
    found: list[str] = []
    for match in _BRACKETED.finditer(text):
        token = match.group(0)
        if _is_forbidden(match.group(1)) and token not in found:
            found.append(token)
    return found


DIGIT_SPOKEN_CHARS: dict[str, int] = {"en": 6, "zh": 2}
"""About how many characters one digit becomes once numbers are read aloud, by the text's language: WeTextProcessing
reads a digit as several words in English and one or two characters in Chinese, so digits are counted as that much of
the text's length (the measurement: BENCHMARKS.md, "Measured once")."""


def spoken_length(text: str) -> tuple[int, int, int]:
    """About how long ``text`` is once its numbers are read aloud, in characters: (that length, its ASCII digits,
    what each counts as, :data:`DIGIT_SPOKEN_CHARS`) — a bound known before a worker's normaliser runs."""
    digits = sum(map(text.count, "0123456789"))
    weight = DIGIT_SPOKEN_CHARS[detect_language(text)]
    return len(text) + digits * (weight - 1), digits, weight


def validate_text(raw: str, max_chars: int) -> str:
    """Clean ``raw`` and refuse it, with a reason a person can act on, if it is unusable.

    The length limit (the caller's: the library reads no configuration of its own) counts the text
    as sent, first, so that the API refuses exactly what its schema's ``maxLength`` says and a long
    text costs no cleaning; and then the cleaned text, since that is what the model sees (cleaning
    almost always shortens a text, but one width form, U+FFE3, becomes two characters). This is the
    one place the limit is checked. It holds for the text as it will be read, too: a number's digits expand
    into words (:func:`spoken_length`), so each counts as several characters.
    """
    if len(raw) > max_chars:
        raise TextError(f"text is {len(raw)} characters long as sent; the limit is {max_chars}")
    if not raw.strip():
        raise TextError("text is empty")
    cleaned = canonical_text(raw)
    if not cleaned:
        raise TextError("text is empty after removing invisible and control characters")
    if len(cleaned) > max_chars:
        raise TextError(f"text is {len(cleaned)} characters long once cleaned; the limit is {max_chars}")
    spoken, digits, weight = spoken_length(cleaned)
    if spoken > max_chars:
        raise TextError(
            f"text reads as about {spoken} characters once its {digits} digits are read aloud (each counts as {weight}); "
            f"the limit is {max_chars}"
        )
    forbidden = find_forbidden_tokens(cleaned)
    if forbidden:
        names = ", ".join(forbidden)
        if len(forbidden) == 1:
            what = f"the ChatTTS control token {names}, which is not allowed"
        else:
            what = f"the ChatTTS control tokens {names}, which are not allowed"
        raise TextError(f"text contains {what}; allowed tokens: {ALLOWED_TOKEN_DESCRIPTION}")
    return cleaned


def _cut_after(text: str, pattern: re.Pattern[str], accept: Callable[[re.Match[str]], bool]) -> list[str]:
    """Cut ``text`` after every accepted match of ``pattern``.

    The pieces concatenate back to ``text`` exactly, which is what lets the splitter promise
    that no content is lost.
    """
    pieces: list[str] = []
    start = 0
    for match in pattern.finditer(text):
        if match.end() > start and accept(match):
            pieces.append(text[start : match.end()])
            start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def is_sentence_end(match: re.Match[str]) -> bool:
    """Accept a punctuation run as a sentence end unless it is only ASCII periods inside a word.

    A lone ASCII period followed by a non-space is a decimal point ("3.5"), an abbreviation
    ("e.g.x") or a file name, never the end of a sentence.
    """
    if match.group(0).rstrip(CLOSERS).strip("."):
        return True
    following = match.string[match.end() : match.end() + 1]
    return following == "" or following.isspace()


def is_clause_end(match: re.Match[str]) -> bool:
    """Accept a clause mark unless it is an ASCII separator between digits ("1,000", "10:30")."""
    if match.group(0).strip(",:"):
        return True
    before = match.string[match.start() - 1 : match.start()]
    after = match.string[match.end() : match.end() + 1]
    return not (before.isdigit() and after.isdigit())


def _is_space(_match: re.Match[str]) -> bool:
    """Accept every whitespace run as a cut point."""
    return True


_LEVELS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], bool]], ...] = (
    (_SENTENCE_END, is_sentence_end),
    (_CLAUSE_END, is_clause_end),
    (WHITESPACE_RUN, _is_space),
)


def _hard_cut(text: str, max_chars: int) -> list[str]:
    """Cut unpunctuated text into ``max_chars`` slices, moving cuts off control tokens.

    Whitespace at either end is kept on the outer slices so that merging later does not glue
    words together. A token longer than ``max_chars`` itself cannot be kept whole without
    breaking the length limit, and the limit wins.
    """
    core = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()) :]
    tokens = [m.span() for m in _ATOMIC_TOKEN.finditer(core)]
    slices: list[str] = []
    start = 0
    while len(core) - start > max_chars:
        cut = start + max_chars
        for token_start, token_end in tokens:
            if token_start < cut < token_end and token_start > start:
                cut = token_start
                break
        slices.append(core[start:cut])
        start = cut
    slices.append(core[start:])
    slices[0] = lead + slices[0]
    slices[-1] = slices[-1] + trail
    return slices


def _split_to_fit(text: str, max_chars: int, level: int) -> list[str]:
    """Split ``text`` at the coarsest boundaries that make every piece fit ``max_chars``."""
    if len(text.strip()) <= max_chars:
        return [text]
    if level == len(_LEVELS):
        return _hard_cut(text, max_chars)
    pattern, accept = _LEVELS[level]
    pieces: list[str] = []
    for piece in _cut_after(text, pattern, accept):
        pieces.extend(_split_to_fit(piece, max_chars, level + 1))
    return pieces


def split_sentences(text: str, max_chars: int) -> list[str]:
    """Split text into synthesis chunks of at most ``max_chars`` characters each.

    Cuts go at sentence ends first, then at clause punctuation, then at spaces, and only as
    a last resort mid-word, so that ChatTTS sees units it can phrase naturally. Neighbouring
    pieces are then merged greedily, in order, while they fit, because every chunk is one
    inference call and short calls waste GPU time and sound choppier. Nothing but
    whitespace at chunk edges is dropped.
    """
    if max_chars < MIN_SPLIT_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_SPLIT_CHARS}, got {max_chars}")
    chunks: list[str] = []
    current = ""
    for piece in _split_to_fit(text, max_chars, 0):
        candidate = current + piece
        if len(candidate.strip()) <= max_chars:
            current = candidate
            continue
        if current.strip():
            chunks.append(current.strip())
        current = piece
    if current.strip():
        chunks.append(current.strip())
    return chunks


def detect_language(text: str) -> Literal["zh", "en"]:
    """Pick the language hint for ChatTTS's text normaliser.

    Any Chinese ideograph means the text needs Chinese normalisation, even when most of it
    is English; a rule this simple is also one callers can predict. Extension blocks are
    included so that rare characters in names count too.
    """
    return "zh" if _CJK_IDEOGRAPH.search(text) else "en"
