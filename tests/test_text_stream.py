"""TextStream: text that arrives in pieces, cut into chunks as its sentences complete (realtime sessions)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ttsq.domain.text import TextStream, split_sentences

MAX = 40
WORDS = st.sampled_from(["Hello", "world", "3.5", "e.g.", "你好", "谢谢", "[uv_break]", "a", "no", "Dr."])
MARKS = st.sampled_from(["", "", ".", "!", "?", ",", "。", "，", "...", '."', "!?"])
TEXTS = st.lists(st.tuples(WORDS, MARKS, st.sampled_from([" ", " ", "", "\n"])), min_size=1, max_size=60).map(
    lambda parts: "".join(w + m + s for w, m, s in parts)
)


def squeeze(text: str) -> str:
    return "".join(text.split())


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.lists(st.integers(1, 12), min_size=1, max_size=40), st.booleans())
def test_nothing_but_whitespace_is_lost_however_the_text_arrives(text: str, cuts: list[int], clauses: bool) -> None:
    stream = TextStream(MAX)
    chunks: list[str] = []
    start, i = 0, 0
    while start < len(text):
        size = cuts[i % len(cuts)]
        chunks += stream.feed(text[start : start + size])
        if clauses and i % 3 == 0:
            chunks += stream.clauses()
        start, i = start + size, i + 1
    chunks += stream.flush()
    assert squeeze("".join(chunks)) == squeeze(text)
    assert stream.pending == ""
    assert all(chunk.strip() == chunk and chunk for chunk in chunks)
    assert all(len(chunk) <= MAX for chunk in chunks if "[" not in chunk)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_text_that_arrives_whole_and_ends_a_sentence_is_cut_as_a_submit(text: str) -> None:
    whole = text.rstrip() + " The end. "
    stream = TextStream(MAX)
    assert stream.feed(whole) + stream.flush() == split_sentences(whole, MAX)


def test_a_sentence_is_spoken_as_soon_as_it_ends_but_a_decimal_point_waits() -> None:
    stream = TextStream(MAX)
    assert stream.feed("It costs 3.") == []  # "3." may be "3.5"
    assert stream.feed("5 dollars.") == ["It costs 3.5 dollars."]
    assert stream.feed(" Next one!?") == ["Next one!?"]
    assert stream.feed(" Chapter 3.") == []
    assert stream.feed(" 你好。") == ["Chapter 3. 你好。"]
    assert stream.pending == ""


def test_clauses_and_flush_speak_what_has_no_sentence_end() -> None:
    stream = TextStream(MAX)
    assert stream.feed("Well, I think that") == []
    assert stream.clauses() == ["Well,"]
    assert stream.clauses() == []  # no clause mark left
    assert stream.flush() == ["I think that"]
    assert stream.flush() == []


def test_a_long_run_without_a_sentence_end_is_spoken_as_it_fills() -> None:
    stream = TextStream(MAX)
    chunks = []
    for word in ("word " * 30).split(" "):
        chunks += stream.feed(word + " ")
    assert chunks and all(len(chunk) <= MAX for chunk in chunks)
    assert len(stream.pending.strip()) <= MAX


def test_a_lone_surrogate_is_dropped_as_it_arrives() -> None:
    stream = TextStream(MAX)
    assert stream.feed("Say \ud800this. And") == ["Say this."]
    assert stream.flush() == ["And"]
