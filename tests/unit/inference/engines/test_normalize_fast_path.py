"""The normaliser's fast path (:func:`spoken_as_is`): what the graphs would say, exactly, for the text it answers.

The property tests compare it with WeTextProcessing's real graphs (in this process, :func:`normalize_pieces`) on text
drawn from what it accepts and from around it (the word-list entries, capitals, marks, digits and symbols it must
leave to the graphs), in both languages.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ttsq.inference.engines.normalize import Language, TextNormalizer, normalize_pieces, spoken_as_is

ENGLISH_WORDS = tuple(
    [
        "Mr",
        "Mrs",
        "Ms",
        "Dr",
        "St",
        "Mt",
        "No",
        "Vol",
        "TV",
        "OK",
        "IV",
        "II",
        "I",
        "A",
        "a",
        "Sat",
        "sat",
        "Sun",
        "sun",
        "Mon",
        "Wed",
        "Fri",
        "Th",
        "Thu",
        "World",
        "War",
        "Ph",
        "Aabo",
        "Abhi",
        "Ata",
        "am",
        "pm",
        "kg",
        "in",
        "m",
        "s",
        "x",
        "e",
        "C",
        "May",
        "March",
        "jan",
        "Jan",
        "www",
        "com",
        "http",
        "Henry",
        "chapter",
        "Chapter",
        "CA",
        "Hon",
        "Rev",
        "Gov",
        "Apt",
        "don",
        "t",
        "ll",
        "The",
        "It",
        "Hello",
        "per",
        "paper",
        "cm",
        "h",
        "Monday",
        "Nobody",
        "Abhix",
        "per h",
        "paper cm",
        "per hour",
        "World War I",
        "Henry I",
        "Chapter I",
        "A'maa",
        "Ata'sx",
    ]
)
"""Words the English graphs could treat specially (word-list entries, units, months, names, states, numerals) and
plain ones beside them."""

ENGLISH_JOINS = [" "] * 8 + [", ", ". ", "! ", "? ", "; ", ": ", "'s ", "'"]
"""What goes between two words in text the fast path accepts."""

ENGLISH_ODD_JOINS = ["  ", "-", "", ".", "... ", "?! ", " , ", "\t", " 3 ", " $5 ", "%", "&", "/", "é", "\n", "'S ", '"']
"""What it leaves to the graphs: doubled or odd spaces, other marks, digits, symbols, letters outside ASCII."""

HAN = "你好今天天气很我们去公园散步吧谢的帮助是一个人中国说话时间年月日点分元米号后之老师学生"
HAN_REFUSED = "這個們儿啊呃後"
"""Traditional characters, erhua, interjections: the Chinese graphs change them."""

ZH_MARKS = "，。！？；：、"
ZH_ODD = [",", ".", "!", "?", "3", "12", "a", "B2B", " ", "“", "”", "（", "%", "-", "～", "．", "\n"]


@st.composite
def english_text(draw: st.DrawFn) -> str:
    word = st.one_of(
        st.sampled_from(ENGLISH_WORDS),
        st.text(string.ascii_lowercase, min_size=1, max_size=7),
        st.text(string.ascii_lowercase, min_size=1, max_size=7).map(str.capitalize),
    )
    odd = draw(st.integers(0, 3)) == 0
    joins = st.sampled_from(ENGLISH_JOINS + ENGLISH_ODD_JOINS) if odd else st.sampled_from(ENGLISH_JOINS)
    parts = draw(st.lists(st.tuples(word, joins), min_size=1, max_size=6))
    text = "".join(w + j for w, j in parts[:-1]) + parts[-1][0] + draw(st.sampled_from(["", ".", "?", "!", ","]))
    return draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " ", "  "]))


@st.composite
def chinese_text(draw: st.DrawFn) -> str:
    plain = st.sampled_from(HAN) | st.sampled_from(ZH_MARKS)
    odd = draw(st.integers(0, 3)) == 0
    pieces = st.one_of(plain, st.sampled_from(HAN_REFUSED), st.sampled_from(ZH_ODD)) if odd else plain
    return "".join(draw(st.lists(pieces, min_size=1, max_size=14)))


def _agrees(text: str, lang: Language) -> None:
    said = spoken_as_is(text, lang)
    event("answered without the graphs" if said is not None else "left to the graphs")
    if said is not None:
        assert said == normalize_pieces(lang, [text])[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(english_text())
def test_english_answers_are_what_the_graphs_say(text: str) -> None:
    _agrees(text, "en")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chinese_text())
def test_chinese_answers_are_what_the_graphs_say(text: str) -> None:
    _agrees(text, "zh")


PLAIN: list[tuple[str, Language]] = [
    ("The morning train was late again, so everyone waited in the rain.", "en"),
    ("A small dog sat beside the bench and watched the empty tracks.", "en"),
    ("I think it's fine; don't you? Yes!", "en"),
    ("  Hello there.  ", "en"),
    ("今天天气很好，我们去公园散步吧。", "zh"),
    ("你好！今天天气怎么样？", "zh"),
    (" \n", "en"),
    ("", "zh"),
]


@pytest.mark.parametrize(("text", "lang"), PLAIN)
def test_plain_sentences_are_answered_and_agree(text: str, lang: Language) -> None:
    said = spoken_as_is(text, lang)
    assert said == text
    assert said == normalize_pieces(lang, [text])[0]


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("I have 3 apples.", "en"),
        ("Mr Smith came.", "en"),
        ("We met on Sun evening.", "en"),
        ("The U. S. A. is big.", "en"),
        ("Watch TV now.", "en"),
        ("a paper cm", "en"),
        ("A'maa said so", "en"),
        ("two  spaces", "en"),
        ("a well-known fact", "en"),
        ("caf\u00e9 time", "en"),
        ("這是繁體字。", "zh"),
        ("我儿子很好。", "zh"),
        ("今天是2026年", "zh"),
        ("好啊。", "zh"),
        ("你好,世界", "zh"),
    ],
)
def test_text_the_graphs_may_change_is_left_to_them(text: str, lang: Language) -> None:
    assert spoken_as_is(text, lang) is None


def test_plain_text_never_reaches_the_child_and_the_rest_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain pieces are answered in the caller's process: the child is not even started; only the other pieces of a
    text cross to it."""
    isolated = TextNormalizer(isolated=True)
    child = isolated._child
    assert child is not None
    for text, lang in PLAIN:
        assert isolated.normalize(f"{text}[uv_break]{text}", lang) == f"{text}[uv_break]{text}"
    assert child._process is None

    sent: list[list[str]] = []
    call = child.call

    def counted(langs: list[str], pieces: list[str]) -> list[str]:
        sent.append(pieces)
        return call(langs, pieces)

    monkeypatch.setattr(child, "call", counted)
    spoken = isolated.normalize("Hello [uv_break] I have 2 cats [laugh_1] ok", "en")
    assert spoken == "Hello [uv_break] I have two cats [laugh_1] ok"
    assert isolated.normalize("好的[laugh_1]今天是3号。", "zh") == "好的[laugh_1]今天是三号。"
    assert sent == [[" I have 2 cats "], ["今天是3号。"]]
