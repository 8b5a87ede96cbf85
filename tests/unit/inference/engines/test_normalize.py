"""Spoken-form normalization with WeTextProcessing, and the protection of ChatTTS control tokens."""

from __future__ import annotations

import re
import sys

import pytest

from ttsq.domain.text import CHATTTS_CONTROL_TOKENS
from ttsq.inference.engines.normalize import NormalizationUnavailableError, TextNormalizer

ASCII_DIGIT = re.compile(r"[0-9]")


@pytest.fixture(scope="module", params=[False, True], ids=["in-process", "isolated"])
def normalizer(request: pytest.FixtureRequest) -> TextNormalizer:
    """Both ways a normaliser runs: in this process, and in a child process of its own (what the engines use)."""
    return TextNormalizer(isolated=request.param)


def test_chinese_numbers_dates_and_amounts_are_spoken(normalizer: TextNormalizer) -> None:
    out = normalizer.normalize("今天是2026年11月30日，价格是3.5元。", "zh")
    assert not ASCII_DIGIT.search(out), out
    assert "二零二六" in out
    assert "三点五" in out


def test_english_numbers_and_money_are_spoken(normalizer: TextNormalizer) -> None:
    out = normalizer.normalize("I have 3 apples and $2.50.", "en")
    assert "three" in out
    assert not ASCII_DIGIT.search(out), out


def test_chinese_sentence_punctuation_stays_full_width(normalizer: TextNormalizer) -> None:
    assert normalizer.normalize("你好！今天天气怎么样？", "zh") == "你好！今天天气怎么样？"


@pytest.mark.parametrize(
    ("text", "lang"),
    [("没有数字的句子。", "zh"), ("no numbers here, right?", "en"), ("Hello there. How are you?", "en")],
)
def test_text_without_numbers_is_unchanged(normalizer: TextNormalizer, text: str, lang: str) -> None:
    assert normalizer.normalize(text, lang) == text  # type: ignore[arg-type]


def test_control_tokens_survive_chinese(normalizer: TextNormalizer) -> None:
    out = normalizer.normalize("你好[uv_break]我有3个苹果[laugh_1]哈哈[break_2]", "zh")
    assert "[uv_break]" in out and "[laugh_1]" in out and "[break_2]" in out
    assert "三个苹果" in out
    assert not ASCII_DIGIT.search(out.replace("[laugh_1]", "").replace("[break_2]", ""))


def test_control_tokens_and_spacing_survive_english(normalizer: TextNormalizer) -> None:
    out = normalizer.normalize("Hello [uv_break] I have 2 cats [laugh_1] ok", "en")
    assert out == "Hello [uv_break] I have two cats [laugh_1] ok"


def test_every_control_token_alone_is_untouched(normalizer: TextNormalizer) -> None:
    for token in CHATTTS_CONTROL_TOKENS:
        assert normalizer.normalize(token, "en") == token
        assert normalizer.normalize(token, "zh") == token


def test_ordinary_brackets_are_still_normalized(normalizer: TextNormalizer) -> None:
    out = normalizer.normalize("see note [2] please", "en")
    assert not ASCII_DIGIT.search(out), out


def test_control_token_list_matches_chattts_tokenizer_order() -> None:
    assert len(CHATTTS_CONTROL_TOKENS) == 50
    assert CHATTTS_CONTROL_TOKENS[:3] == ("[Sasr]", "[Pasr]", "[Easr]")
    assert CHATTTS_CONTROL_TOKENS[-1] == "[speed_9]"


def test_unknown_language_is_refused(normalizer: TextNormalizer) -> None:
    with pytest.raises(ValueError, match="unsupported language"):
        normalizer.normalize("bonjour", "fr")  # type: ignore[arg-type]


def test_missing_wetextprocessing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tn", None)
    with pytest.raises(NormalizationUnavailableError, match="normalize_text=False"):
        TextNormalizer()


def test_an_isolated_normaliser_whose_process_died_starts_another() -> None:
    """The child killed (out of memory, say): the next call starts another and answers as before."""
    isolated = TextNormalizer(isolated=True)
    assert isolated.normalize("I have 3 apples.", "en") == "I have three apples."
    child = isolated._child
    assert child is not None and child._process is not None
    child._process.kill()
    child._process.wait()
    assert isolated.normalize("I have 4 apples.", "en") == "I have four apples."


def test_an_isolated_normaliser_keeps_control_tokens_and_odd_text() -> None:
    """What crosses to the child and back is the text between control tokens, any code point included."""
    isolated, here = TextNormalizer(isolated=True), TextNormalizer()
    for text in ["a [uv_break] b [laugh_1]", "emoji 🎉 5 and tab\tend", "", "二零 12 [laugh_0]"]:
        assert isolated.normalize(text, "en") == here.normalize(text, "en")
    for normalizer in (isolated, here):  # the API refuses such text; here both fail alike, and the child serves on
        with pytest.raises(ValueError, match="surrogate"):
            normalizer.normalize("lone \ud800 surrogate 2", "en")
    assert isolated.normalize("now 7", "en") == "now seven"
