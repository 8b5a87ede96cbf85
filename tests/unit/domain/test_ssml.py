"""SSML read into spans (:mod:`ttsq.domain.ssml`): breaks as exact samples, rate as ChatTTS's speed, volume as gain,
voices and marks where the audio can place them, ``say-as`` written out; every unsupported element or attribute and
every malformed document refused naming it and where; hostile XML refused before anything is expanded, with the
reader's memory bounded by the document's size (tracemalloc: pyexpat allocates through Python's allocator)."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

from ttsq.domain.segments import Mark
from ttsq.domain.ssml import Position, Span, SpanMark, SsmlError, SsmlLimits, read_ssml
from ttsq.domain.ssml_conformance import (
    ELEMENTS,
    MAX_MARK_NAME_CHARS,
    REFUSED_ELEMENTS,
    conformance_markdown,
)

ROOT = Path(__file__).resolve().parents[3]
LIMITS = SsmlLimits(max_chars=10_000, max_depth=32, max_elements=200)
WIDEST = SsmlLimits(max_chars=1_000_000, max_depth=1_000, max_elements=100_000)
"""The largest limits the settings allow (settings.py): a hostile document is still refused under them."""


def spans(source: str, speed: int = 5) -> list[Span]:
    return list(read_ssml(source, LIMITS, speed).spans)


def refused(source: str, limits: SsmlLimits = LIMITS) -> SsmlError:
    with pytest.raises(SsmlError) as caught:
        read_ssml(source, limits, 5)
    return caught.value


# ---- what a document says ----------------------------------------------------------------------------------------


def test_a_break_is_exactly_its_samples_at_24khz_in_place_of_the_usual_pause() -> None:
    found = spans('<speak>Hello <break time="700ms"/>world<break time="1.5s"/><break strength="weak"/>end.<break/></speak>')
    assert [(span.text, span.pause_samples) for span in found] == [
        ("Hello", None),
        ("world", 16_800),
        ("end.", 36_000 + 12_000),  # breaks in a row add up
        ("", 18_000),  # a trailing break is silence alone: medium, 750 ms
    ]
    assert spans('<speak>a<break time="0.5ms"/>b</speak>')[1].pause_samples == 12, "rounded to the nearest sample"


def test_voices_rates_and_volumes_start_new_spans_and_nest() -> None:
    found = spans(
        '<speak>Plain. <voice name="zh_female">She says <prosody rate="x-slow" volume="-6dB">slowly '
        '<prosody rate="200%" volume="+3dB">and back</prosody></prosody></voice> <voice name="zh_male">'
        '<prosody rate="fast" volume="loud">He answers.</prosody></voice></speak>'
    )
    assert [(span.text, span.voice, span.speed, span.gain_db) for span in found] == [
        ("Plain.", None, None, None),
        ("She says", "zh_female", None, None),
        ("slowly", "zh_female", 1, -6.0),
        ("and back", "zh_female", None, -3.0),  # 200% of 1 is 5, the request's own speed
        ("He answers.", "zh_male", 7, 6.0),
    ]
    assert spans('<speak><prosody rate="50%">x</prosody></speak>', speed=7)[0].speed == 3, "relative to the request's"


def test_marks_stand_where_a_run_of_speech_begins_or_ends() -> None:
    found = spans('<speak><mark name="a"/>One <mark name="b"/>two <mark name="c"/><break time="1s"/>three<mark name="d"/></speak>')
    assert [(span.text, span.marks) for span in found] == [
        ("One", (SpanMark("a", 0),)),
        ("two", (SpanMark("b", 0), SpanMark("c", 3))),
        ("three", (SpanMark("d", 5),)),
    ]
    assert Mark.model_fields["name"].metadata[1].max_length == MAX_MARK_NAME_CHARS, "a span's mark fits a segment's"


def test_paragraphs_and_sentences_end_and_paragraphs_are_apart() -> None:
    found = spans("<speak><p><s>One</s><s>Two!</s></p><p>Three</p></speak>")
    assert [(span.text, span.pause_samples) for span in found] == [("One. Two!", None), ("Three.", 24_000)]
    assert spans('<speak xml:lang="zh-CN"><s>你好</s></speak>')[0].text == "你好。"


def test_say_as_and_sub_are_written_out_in_the_documents_language() -> None:
    english = spans(
        '<speak>It is <say-as interpret-as="ordinal">3</say-as> on <say-as interpret-as="date" format="mdy">'
        '12/06/2026</say-as> at <say-as interpret-as="time">9:05 pm</say-as>, call <say-as interpret-as="telephone">'
        '+1 555 0100</say-as>, <sub alias="World Wide Web">WWW</sub> <say-as interpret-as="characters">AB1</say-as> '
        '<say-as interpret-as="cardinal">42</say-as> <say-as interpret-as="digits">42</say-as></speak>'
    )
    assert english[0].text == (
        "It is third on December sixth, twenty twenty six at nine oh five p m, call plus one, five five five, zero "
        "one zero zero, World Wide Web A B one forty two four two"
    )
    chinese = spans(
        '<speak>价格<say-as interpret-as="cardinal">1234</say-as>元，<say-as interpret-as="date">2024-03-05</say-as></speak>'
    )
    assert chinese[0].text == "价格一千二百三十四元，二零二四年三月五日"


# ---- what is refused ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element", sorted(REFUSED_ELEMENTS))
def test_every_unsupported_element_is_refused_naming_it_where_and_the_supported_list(element: str) -> None:
    error = refused(f"<speak>Hi\n  <{element}>x</{element}></speak>")
    assert error.position == Position(2, 3)
    assert f"<{element}> is not supported ({REFUSED_ELEMENTS[element]})" in str(error)
    assert "supported elements: " + ", ".join(ELEMENTS) in str(error)


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ('<speak><prosody pitch="high">x</prosody></speak>', "<prosody> attribute 'pitch' is not supported (ChatTTS has no pitch"),
        ('<speak><break foo="1"/>x</speak>', "<break> attribute 'foo' is not supported; supported attributes of <break>: time"),
        ("<speak><p a='1'>x</p></speak>", "supported attributes of <p>: none"),
        ('<speak><say-as interpret-as="currency">1</say-as></speak>', "interpret-as 'currency' is not supported; supported:"),
        ('<speak><break time="2min"/>x</speak>', "is not a duration such as 700ms or 1.5s"),
        ('<speak><break time="61s"/>x</speak>', "longer than a minute"),
        ('<speak><prosody volume="+30dB">x</prosody></speak>', "the gain must stay within -60 to +20 dB"),
        ('<speak xml:lang="fr">x</speak>', "ChatTTS speaks English (en) and Chinese (zh)"),
        ("<voice name='a'>x</voice>", "the root element must be <speak>"),
        ("<speak><mark/>x</speak>", "<mark> needs its 'name' attribute"),
        ("<speak><break>x</break></speak>", "<break> holds nothing, not text"),
        ("<speak><break/></speak>", "nothing to speak"),
    ],
)
def test_unsupported_attributes_and_values_are_refused_naming_them(source: str, said: str) -> None:
    assert said in str(refused(source))


@pytest.mark.parametrize(
    ("source", "where"),
    [("<speak>\n  <p>x</s>\n</speak>", Position(2, 9)), ("<speak>a & b</speak>", Position(1, 11)), ("<speak>x", Position(1, 9))],
)
def test_malformed_xml_is_refused_with_its_line_and_column(source: str, where: Position) -> None:
    error = refused(source)
    assert error.position == where and str(error).startswith(f"{where}: ssml is not well-formed XML")


# ---- hostile documents ----------------------------------------------------------------------------------------------

LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">' for n in range(1, 10))
    + "]><speak>&lol9;</speak>"
)
EXTERNAL = '<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>'
DEEP = "<speak>" + "<prosody>" * 10_000 + "x" + "</prosody>" * 10_000 + "</speak>"
LONG_ATTRIBUTE = '<speak><mark name="' + "a" * 1_000_000 + '"/>x</speak>'


@pytest.mark.parametrize(
    ("source", "limits", "said"),
    [
        (LAUGHS, WIDEST, "must not have a document type"),
        (EXTERNAL, WIDEST, "must not have a document type"),
        (
            '<speak xmlns:xi="http://www.w3.org/2001/XInclude"><xi:include href="/etc/passwd"/></speak>',
            WIDEST,
            "<xi:include> is not supported",
        ),
        (DEEP, WIDEST, "nests elements more than 1000 deep"),
        (DEEP, replace(WIDEST, max_depth=32), "nests elements more than 32 deep"),
        ("<speak>" + "<break/>" * 100_000 + "x</speak>", replace(WIDEST, max_elements=200), "more than 200 elements"),
        (LONG_ATTRIBUTE[:999_000] + '"/>x</speak>', WIDEST, "attribute 'name' is 998981 characters long"),
    ],
)
def test_hostile_xml_is_refused_under_the_widest_limits_with_memory_bounded_by_its_size(
    source: str, limits: SsmlLimits, said: str
) -> None:
    """Under the defaults each is refused by its length alone (below); under the largest limits the settings allow,
    by what it is, before any entity is expanded or any tree is built: the reader's peak allocation stays within a
    few times the document's own size (a billion laughs expanded would be gigabytes). (Each element read is a few
    hundred bytes of events until the document is refused, so ``MAX_SSML_ELEMENTS`` bounds that: the element flood
    is measured at the default, 200.)"""
    tracemalloc.start()
    try:
        error = refused(source, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert said in str(error)
    assert peak < 8 * len(source) + 1_000_000, f"{peak} bytes allocated reading {len(source)} characters"


@pytest.mark.parametrize("source", [DEEP, LONG_ATTRIBUTE])
def test_a_document_past_max_ssml_chars_is_refused_before_it_is_parsed(source: str) -> None:
    tracemalloc.start()
    try:
        error = refused(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.position is None and "the limit is 10000 (MAX_SSML_CHARS)" in str(error)
    assert peak < 100_000, "nothing of it was read"


# ---- the conformance table ------------------------------------------------------------------------------------------


def test_docs_ssml_md_carries_the_conformance_table_the_reader_enforces() -> None:
    doc = (ROOT / "docs" / "ssml.md").read_text(encoding="utf-8")
    assert conformance_markdown() in doc, "regenerate it: .venv/bin/python scripts/ssml_docs.py --write"
    for element in [*ELEMENTS, *REFUSED_ELEMENTS]:
        assert f"| `<{element}>` |" in doc
