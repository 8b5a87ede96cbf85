"""The cache key is what the model sees: checked against ChatTTS's own normalizer and the checkpoint's tokenizer.

``model_tokens`` runs a text through the real ``ChatTTS.norm.Normalizer`` (as the engine calls
ChatTTS: no normalizer registered inside it, language given, homophones on) and then the tiny
checkpoint's tokenizer (``tokenizers``, no torch), keeping each token's text so that two different
unknown words are not mistaken for one. The properties:

* faithful — the canonical text the engine now receives reads exactly like the original text;
* one key if and only if one token sequence — for Chinese text with any mix of half- and full-width
  punctuation, ChatTTS's folded marks and spacing, and for English text spaced as people type it;
* the limits docs/cache.md names (letter case, characters ChatTTS deletes, a missing space after an
  ASCII mark between English words, anything next to a digit) keep their own keys;
* with the number normalizer in front (the worker's full text path), the canonical text still reads
  the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import tokenizers
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.support.helpers import params_for
from ttsq.api.schemas import SubmitRequest
from ttsq.domain.text import CHATTTS_HALF_TO_FULL, CHATTTS_SIMPLIFIER, canonical_text, clean_text, detect_language, fold_width

MODEL = "tiny-random|chunk=40"


@pytest.fixture(scope="module")
def chattts_normalizer() -> Any:
    from importlib.resources import files

    import ChatTTS.norm

    return ChatTTS.norm.Normalizer(str(files("ChatTTS").joinpath("res", "homophones_map.json")))


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint_dir: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(tiny_checkpoint_dir / "asset" / "tokenizer" / "tokenizer.json"))


@pytest.fixture(scope="module")
def model_tokens(chattts_normalizer: Any, tokenizer: tokenizers.Tokenizer) -> Any:
    @cache
    def tokens(text: str) -> tuple[str, ...]:
        normalized = chattts_normalizer(text, True, True, detect_language(text))
        encoding = tokenizer.encode(normalized, add_special_tokens=False)
        return tuple(
            normalized[start:end].lower() if token == "[UNK]" else token
            for token, (start, end) in zip(encoding.tokens, encoding.offsets, strict=True)
        )

    return tokens


def key(text: str) -> str | None:
    return params_for(SubmitRequest(text=text, seed=7), 10_000, MODEL).cache_key


def test_the_mapping_tables_are_chattts_own(chattts_normalizer: Any) -> None:
    """Copied from ChatTTS 0.2.5's norm.py; a ChatTTS upgrade that changes them fails here."""
    assert {ord(k): v for k, v in CHATTTS_HALF_TO_FULL.items()} == chattts_normalizer.halfwidth_2_fullwidth
    assert {ord(k): v for k, v in CHATTTS_SIMPLIFIER.items()} == chattts_normalizer.character_simplifier


# ---- texts -------------------------------------------------------------------------------------

CJK = list("你好世界今天我们中文")
"""Common ideographs outside ChatTTS's homophone map (a key there would be replaced by ChatTTS)."""
ZH_MARKS = list(",.:;!()-，。：；！（）、【】《》「」")
TAGS = ["[uv_break]", "[laugh]", "[break_2]"]
SPACES = [" ", "  ", "\u3000", "\t"]


@st.composite
def chinese_texts(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.sampled_from(CJK * 3 + ZH_MARKS + SPACES + TAGS + ["a", "b"]), min_size=1, max_size=12))
    text = "".join(pieces)
    assume(any(char in CJK for char in text))
    return text


@st.composite
def english_texts(draw: st.DrawFn) -> str:
    """Words and marks as people type them: optional spaces before a mark, one or more spaces after it.

    No "(": ChatTTS reads it as "," and the space after it is ignored, so "a (b" reads as "a,b" — the
    missing-space-after-a-mark limit, which has its own test below.
    """
    out = []
    for _ in range(draw(st.integers(1, 5))):
        out.append(draw(st.sampled_from(["hello", "world", "ok", "a", "b"])))
        mark = draw(st.sampled_from(["", ",", ".", ":", ";", "!", "-", ")"]))
        if mark:
            out.append(draw(st.sampled_from(["", " ", "  "])) + mark)
        out.append(draw(st.sampled_from([" ", "  ", " \t"])))
    return "".join(out)


texts = st.one_of(chinese_texts(), english_texts())


# ---- the properties ----------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_the_canonical_text_reads_exactly_like_the_original(model_tokens: Any, text: str) -> None:
    assume(clean_text(fold_width(text)))
    assert model_tokens(canonical_text(text)) == model_tokens(clean_text(fold_width(text)))


@settings(max_examples=600, deadline=None)
@given(pair=st.one_of(st.tuples(chinese_texts(), chinese_texts()), st.tuples(english_texts(), english_texts())))
def test_one_key_if_and_only_if_one_token_sequence(model_tokens: Any, pair: tuple[str, str]) -> None:
    first, second = pair
    assume(canonical_text(first) and canonical_text(second))
    assert (key(first) == key(second)) == (model_tokens(first) == model_tokens(second)), (
        canonical_text(first),
        canonical_text(second),
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("请坐：这里，谢谢。", "请坐:这里,谢谢."),
        ("你 好 ， 世 界 。", "你好，世界。"),
        ("你好（世界）", "你好(世界)"),
        ("你好！再见！", "你好。再见。"),
        ("Hello , world !", "Hello, world."),
        ("wait ( here )", "wait (here)"),
    ],
)
def test_what_a_user_retypes_shares_one_key(model_tokens: Any, first: str, second: str) -> None:
    """The examples from the issue (ASCII ": , ." for "： ， 。", spaces between Chinese characters) and kin."""
    assert model_tokens(first) == model_tokens(second)
    assert key(first) == key(second)


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        ("Hello world", "hello world", "letter case: the number normalizer reads 'Dr.' and 'dr.' differently"),
        ("“你好”世界", "你好世界", "characters ChatTTS deletes (quotes, '?', '…') may still shape the sentence splitting"),
        ("hello,world", "hello, world", "a missing space after an ASCII mark: the splitter tells '3.5' and 'e.g.' apart by it"),
        ("价格3.5元", "价格3。5元", "anything next to a digit: the number normalizer reads '3.5' as a number"),
    ],
)
def test_the_documented_limits_keep_their_own_keys(model_tokens: Any, first: str, second: str, why: str) -> None:
    """Pairs ChatTTS reads alike but ttsq keys apart, on purpose (docs/cache.md)."""
    assert model_tokens(first) == model_tokens(second)
    assert key(first) != key(second), why


@pytest.fixture(scope="module")
def text_normalizer() -> Iterator[Any]:
    from ttsq.inference.engines.normalize import TextNormalizer

    normalizer = TextNormalizer()
    normalizer.preload(("zh", "en"))
    yield normalizer


NUMBERED = [
    "今天是2026年11月30日：价格是3.5元（含税）！",
    "I have 3 apples : and $2.50 on Nov 30, 2026 ( today ) !",
    "电话 12345 ， 谢谢 。",
]


@settings(max_examples=30, deadline=None)
@given(text=st.one_of(st.sampled_from(NUMBERED), chinese_texts(), english_texts()))
def test_with_the_number_normalizer_in_front_the_canonical_text_reads_the_same(
    model_tokens: Any, text_normalizer: Any, text: str
) -> None:
    """The worker normalizes numbers before ChatTTS; rewriting punctuation first must not change what it says."""
    original = clean_text(fold_width(text))
    assume(original)
    lang = detect_language(original)
    assert model_tokens(text_normalizer.normalize(canonical_text(text), lang)) == model_tokens(
        text_normalizer.normalize(original, lang)
    )


def test_keys_survive_a_json_round_trip_of_the_request() -> None:
    """The web page and SDKs send JSON; escaping must not change a key."""
    text = "你好：世界\u3000!"
    assert key(json.loads(json.dumps(text))) == key(text)
