"""Tests for ttsq.domain.text: cleaning, token policy, splitting and language detection."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttsq.domain.text import (
    ALLOWED_TOKEN_DESCRIPTION,
    WIDTH_FORM_CODE_POINTS,
    TextError,
    _drop_ignored_spaces,  # the private helpers: the fast path against its definition
    _is_bert_cjk,
    _space_after_is_ignored,
    _space_before_is_ignored,
    canonical_text,
    clean_text,
    detect_language,
    find_forbidden_tokens,
    fold_width,
    split_sentences,
    validate_text,
)

ALLOWED_TOKENS = (
    ["[uv_break]", "[laugh]", "[lbreak]"]
    + [f"[break_{n}]" for n in range(8)]
    + [f"[laugh_{n}]" for n in range(3)]
    + [f"[oral_{n}]" for n in range(10)]
)

FORBIDDEN_TOKENS = [
    "[Sasr]",
    "[Pasr]",
    "[Easr]",
    "[Stts]",
    "[Ptts]",
    "[Etts]",
    "[Sbreak]",
    "[Pbreak]",
    "[Ebreak]",
    "[v_break]",
    "[llbreak]",
    "[undefine]",
    "[spk_emb]",
    "[empty_spk]",
    "[music]",
    "[pure]",
    "[speed_0]",
    "[speed_5]",
    "[speed_10]",
    "[break_8]",
    "[break_9]",
    "[laugh_3]",
    "[laugh_7]",
    "[oral_10]",
    "[oral_12]",
    "[stts]",
    "[STTS]",
    "[SPEED_3]",
    "[Spk_Emb]",
    "[BREAK_9]",
]

TOKEN = re.compile(r"\[[A-Za-z0-9_]+\]")


def _no_space(text: str) -> str:
    """Content as the splitter promises to preserve it: everything but whitespace."""
    return re.sub(r"\s+", "", text)


# --- cleaning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\u200bb", "ab"),
        ("\ufeffhello", "hello"),
        ("abc\u200f def\u200e", "abc def"),
        ("\u202eevil\u202c text", "evil text"),
        ("a\x00b\x07c\x1bd\x7f", "abcd"),
        ("one\ttwo\nthree\r\nfour", "one two three four"),
        ("  lots   of \t\n  space  ", "lots of space"),
        ("你好\u3000世界", "你好 世界"),
        ("line\u2028break", "line break"),
        ("soft\u00adhyphen", "softhyphen"),
    ],
)
def test_clean_text_removes_invisible_and_normalises_whitespace(raw: str, expected: str) -> None:
    assert clean_text(raw) == expected


def test_clean_text_keeps_visible_content_unfolded() -> None:
    text = "Ｈｅｌｌｏ，世界！x² = 3.5 (e.g.) 「引用」 …"
    assert clean_text(text) == text


def test_clean_text_removes_private_use_and_unassigned() -> None:
    assert clean_text("a\ue000b\U000e0001c\U0010fffdd") == "abcd"


# --- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", "   ", "\n\t "])
def test_validate_empty(raw: str) -> None:
    with pytest.raises(TextError, match=r"^text is empty$"):
        validate_text(raw, 100)


@pytest.mark.parametrize("raw", ["\u200b", "\ufeff\u200d", " \u200e\x00 "])
def test_validate_empty_after_cleaning(raw: str) -> None:
    with pytest.raises(TextError, match="empty after removing invisible and control"):
        validate_text(raw, 100)


def test_validate_length_limit() -> None:
    assert validate_text("a" * 10, 10) == "a" * 10
    with pytest.raises(TextError, match="text is 11 characters long as sent; the limit is 10"):
        validate_text("a" * 11, 10)


def test_validate_length_counts_the_text_as_sent() -> None:
    """What the API's schema says (``maxLength``): invisible characters count, though cleaning removes them."""
    assert validate_text("\u200babc", 4) == "abc"
    with pytest.raises(TextError, match="text is 5 characters long as sent; the limit is 4"):
        validate_text("\u200b" * 2 + "abc", 4)


def test_validate_length_counts_the_cleaned_text_too() -> None:
    """The one width form that cleaning lengthens (U+FFE3 becomes a space and a combining macron): what the model
    would see is over the limit though the text as sent is not."""
    assert len(canonical_text("a\uffe3b")) == 4
    with pytest.raises(TextError, match="text is 4 characters long once cleaned; the limit is 3"):
        validate_text("a\uffe3b", 3)


def test_validate_returns_canonical_text() -> None:
    """Width forms fold, then Chinese punctuation takes ChatTTS's full-width form, and spaces its tokenizer ignores go."""
    assert validate_text("\ufeff你好，\n世界。", 100) == "你好，世界。"
    assert validate_text("你好, 世界.", 100) == "你好，世界。"
    assert validate_text("Ｈｅｌｌｏ　ｗｏｒｌｄ", 100) == "Hello world"


@pytest.mark.parametrize("token", ALLOWED_TOKENS)
def test_every_allowed_token_passes(token: str) -> None:
    text = f"你好{token}世界 hello {token}"
    assert find_forbidden_tokens(text) == []
    assert validate_text(text, 100) == f"你好{token}世界hello {token}", "spaces next to Chinese characters go; tokens stay whole"


@pytest.mark.parametrize("token", FORBIDDEN_TOKENS)
def test_every_forbidden_token_is_rejected_by_name(token: str) -> None:
    text = f"hello {token} world"
    assert find_forbidden_tokens(text) == [token]
    with pytest.raises(TextError) as info:
        validate_text(text, 100)
    message = str(info.value)
    assert token in message
    assert ALLOWED_TOKEN_DESCRIPTION in message


def test_forbidden_message_format_single() -> None:
    with pytest.raises(TextError) as info:
        validate_text("hi [Stts]", 100)
    assert str(info.value) == (
        "text contains the ChatTTS control token [Stts], which is not allowed; "
        "allowed tokens: [uv_break], [laugh], [lbreak], [break_0..7], [laugh_0..2], "
        "[oral_0..9]"
    )


def test_all_forbidden_tokens_are_named_once_in_order() -> None:
    text = "[speed_5] a [uv_break] b [Stts] c [speed_5] [music]"
    assert find_forbidden_tokens(text) == ["[speed_5]", "[Stts]", "[music]"]
    with pytest.raises(TextError) as info:
        validate_text(text, 100)
    assert "control tokens [speed_5], [Stts], [music], which are not allowed" in str(info.value)


def test_forbidden_token_hidden_by_invisible_characters_is_caught() -> None:
    with pytest.raises(TextError, match=r"\[Stts\]"):
        validate_text("hi [S\u200btts]", 100)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("[note]", "[note]"),
        ("see [1] and [2]", "see [1] and [2]"),
        ("[Laugh] is just text", "[Laugh] is just text"),
        ("[ Stts ]", "[ Stts ]"),
        ("[]", "[]"),
        ("a]b[c", "a]b[c"),
    ],
)
def test_ordinary_bracketed_text_passes(text: str, canonical: str) -> None:
    assert find_forbidden_tokens(text) == []
    assert validate_text(text, 100) == canonical


def test_canonicalising_never_turns_text_into_a_control_token() -> None:
    """The tokenizer matches "[Stts]" on the raw text, so spaces inside square brackets always stay."""
    assert validate_text("hi [ Stts ] and （ 注意 ）", 100) == "hi [ Stts ] and，注意，"
    assert find_forbidden_tokens(canonical_text("[Stts ]")) == []


# --- splitting --------------------------------------------------------------------------


def test_split_empty() -> None:
    assert split_sentences("", 50) == []
    assert split_sentences("   \n ", 50) == []


def test_split_rejects_tiny_limit() -> None:
    with pytest.raises(ValueError):
        split_sentences("hello", 7)


def test_split_short_text_is_one_chunk() -> None:
    assert split_sentences("  Hello world.  ", 50) == ["Hello world."]


def test_split_chinese_punctuation_keeps_it_with_sentence() -> None:
    text = "今天天气很好。我们去公园吧！你想去吗？好的；走吧…"
    assert split_sentences(text, 8) == ["今天天气很好。", "我们去公园吧！", "你想去吗？好的；", "走吧…"]


def test_split_english_punctuation() -> None:
    text = "Hello there. How are you? I am fine! Good; thanks."
    assert split_sentences(text, 14) == [
        "Hello there.",
        "How are you?",
        "I am fine!",
        "Good; thanks.",
    ]


def test_split_merges_short_sentences_greedily() -> None:
    text = "A. B. C. D. E."
    assert split_sentences(text, 8) == ["A. B. C.", "D. E."]
    assert split_sentences("一。二。三。四。五。六。七。", 8) == ["一。二。三。四。", "五。六。七。"]


def test_split_decimal_and_abbreviation_stay_intact() -> None:
    chunks = split_sentences("The value is 3.5 meters. Version 2.0.1 is out.", 24)
    assert chunks == ["The value is 3.5 meters.", "Version 2.0.1 is out."]
    assert any("e.g.x" in chunk for chunk in split_sentences("Use e.g.x here. More words.", 15))


def test_split_closing_quote_stays_with_sentence() -> None:
    assert split_sentences("他说：“你好。”然后走了。", 8) == ["他说：“你好。”", "然后走了。"]


def test_split_long_sentence_at_clause_punctuation() -> None:
    text = "第一部分，第二部分，第三部分、第四部分：结束。"
    chunks = split_sentences(text, 12)
    assert chunks == ["第一部分，第二部分，", "第三部分、第四部分：", "结束。"]


def test_split_long_sentence_at_spaces() -> None:
    text = "one two three four five six seven eight nine ten"
    chunks = split_sentences(text, 15)
    assert chunks == ["one two three", "four five six", "seven eight", "nine ten"]


def test_split_does_not_cut_thousands_separator_when_avoidable() -> None:
    chunks = split_sentences("It cost 1,000 dollars, more or less", 22)
    assert "1,000" in chunks[0]


def test_split_2000_chars_without_punctuation() -> None:
    text = "字" * 2000
    chunks = split_sentences(text, 100)
    assert len(chunks) == 20
    assert all(len(chunk) <= 100 for chunk in chunks)
    assert "".join(chunks) == text


@pytest.mark.parametrize("max_chars", [8, 9, 10, 13, 50, 99])
def test_split_2000_latin_chars_without_punctuation(max_chars: int) -> None:
    text = "abcdefghij" * 200
    chunks = split_sentences(text, max_chars)
    assert all(0 < len(chunk) <= max_chars for chunk in chunks)
    assert "".join(chunks) == text


@pytest.mark.parametrize("max_chars", [10, 11, 12, 15, 17, 23])
def test_split_never_cuts_tokens(max_chars: int) -> None:
    text = ("好" * 7 + "[uv_break]" + "x" * 5 + "[laugh_2]") * 10
    chunks = split_sentences(text, max_chars)
    assert all(len(chunk) <= max_chars for chunk in chunks)
    assert sum(len(TOKEN.findall(chunk)) for chunk in chunks) == 20
    assert "".join(chunks) == text


# --- splitting: properties --------------------------------------------------------------

_PIECES = st.one_of(
    st.text(alphabet="你好世界我们天气很中文字", min_size=1, max_size=12),
    st.text(alphabet="abcdefgXYZ0123456789", min_size=1, max_size=12),
    st.sampled_from(
        [
            " ",
            "  ",
            "\t",
            "\n",
            "。",
            "！",
            "？",
            "；",
            "…",
            "……",
            ".",
            "!",
            "?",
            ";",
            "，",
            "、",
            ",",
            "：",
            ":",
            "”",
            '"',
            ")",
            "3.5",
            "e.g.",
            "1,000",
            "10:30",
            "...",
            "[note]",
            "[1]",
            "[",
            "]",
        ]
    ),
    st.sampled_from(ALLOWED_TOKENS),
)
_TEXTS = st.lists(_PIECES, max_size=60).map("".join)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(text=_TEXTS, max_chars=st.integers(min_value=8, max_value=80))
def test_split_property_limits_and_content(text: str, max_chars: int) -> None:
    chunks = split_sentences(text, max_chars)
    assert all(len(chunk) <= max_chars for chunk in chunks)
    assert all(chunk and chunk == chunk.strip() for chunk in chunks)
    assert "".join(map(_no_space, chunks)) == _no_space(text)
    if not text.strip():
        assert chunks == []


@settings(max_examples=400, deadline=None, derandomize=True)
@given(text=_TEXTS, max_chars=st.integers(min_value=10, max_value=80))
def test_split_property_tokens_never_cut(text: str, max_chars: int) -> None:
    def fitting_tokens(part: str) -> int:
        return sum(1 for token in TOKEN.findall(part) if len(token) <= max_chars)

    chunks = split_sentences(text, max_chars)
    assert sum(fitting_tokens(chunk) for chunk in chunks) == fitting_tokens(text)


# --- language ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("你好", "zh"),
        ("Hello world", "en"),
        ("Mostly English with one 字 in it", "zh"),
        ("", "en"),
        ("123 !?", "en"),
        ("こんにちは", "en"),
        ("한국어", "en"),
        ("Ｈｅｌｌｏ，", "en"),
        ("\U00020000", "zh"),
        ("\u3400", "zh"),
    ],
)
def test_detect_language(text: str, expected: str) -> None:
    assert detect_language(text) == expected


# ---- the fast paths equal the definitions ---------------------------------------------------------

_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn"}


def _clean_text_by_definition(raw: str) -> str:
    """clean_text as its docstring defines it, one character at a time (the code takes a shortcut for printable text)."""
    kept = [" " if char.isspace() else char for char in raw if char.isspace() or unicodedata.category(char) not in _INVISIBLE]
    return re.sub(r"\s+", " ", "".join(kept)).strip()


def _drop_ignored_spaces_by_definition(text: str) -> str:
    """Every space between two characters looked at, one call each, by the rule in _drop_ignored_spaces' docstring (the
    code finds the spaces differently and skips those between two ASCII letters, which always stay)."""

    def kept(match: re.Match[str]) -> str:
        before, after = match.group(1), match.group(2)
        ignored = _is_bert_cjk(before) or _is_bert_cjk(after) or _space_before_is_ignored(after) or _space_after_is_ignored(before)
        return before if ignored and not (before.isdigit() or after.isdigit()) else before + " "

    return re.sub(r"(.) (?=(.))", kept, text, flags=re.DOTALL)


def _fold_width_by_definition(text: str) -> str:
    return "".join(
        unicodedata.normalize("NFKC", char) if unicodedata.decomposition(char).startswith(("<wide>", "<narrow>")) else char
        for char in text
    )


_ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60) | st.text(
    alphabet=st.sampled_from(" \t\n\u3000\u00a0\u200b\ufeffａ，。 Hi你好!?\ue000"), max_size=30
)


@settings(max_examples=400, deadline=None)
@given(raw=_ANY_TEXT)
def test_clean_text_is_its_definition(raw: str) -> None:
    assert clean_text(raw) == _clean_text_by_definition(raw)


@settings(max_examples=400, deadline=None)
@given(raw=_ANY_TEXT)
def test_fold_width_is_its_definition(raw: str) -> None:
    assert fold_width(raw) == _fold_width_by_definition(raw)


@settings(max_examples=400, deadline=None)
@given(raw=_ANY_TEXT | st.text(alphabet=st.sampled_from("ab Z9,.([ )]，你"), max_size=40))
def test_dropping_ignored_spaces_is_its_definition(raw: str) -> None:
    text = clean_text(raw)
    assert _drop_ignored_spaces(text) == _drop_ignored_spaces_by_definition(text)


def test_every_wide_and_narrow_form_is_where_fold_width_looks() -> None:
    """fold_width's table covers the ideographic space and the Halfwidth and Fullwidth Forms block; a Unicode that put such
    a form elsewhere would slip past it."""
    forms = [code for code in range(sys.maxunicode + 1) if unicodedata.decomposition(chr(code)).startswith(("<wide>", "<narrow>"))]
    assert len(forms) > 200
    assert set(forms) <= set(WIDTH_FORM_CODE_POINTS)
    assert all(fold_width(chr(code)) == unicodedata.normalize("NFKC", chr(code)) for code in forms)
