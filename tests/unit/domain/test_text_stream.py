"""TextStream: text that arrives in pieces, cut into chunks as its sentences complete (realtime sessions).

LLMs stream punctuation as tokens of its own ("Really" "!" "?"; "Well" "." "." "."; '"yes' "." '"'), so the
properties below split texts at every possible place: the chunks depend on the text, never on its pieces."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ttsq.domain.text import split_sentences
from ttsq.domain.text_stream import TextStream

MAX = 40
WORDS = st.sampled_from(["Hello", "world", "3.5", "e.g.", "你好", "谢谢", "[uv_break]", "a", "no", "Dr.", "3", "Well", "yes"])
MARKS = st.sampled_from(["", "", ".", "!", "?", ",", "。", "，", "...", '."', "!?", " !", " ?", '"', "”", " . . .", ":"])
SPACES = st.sampled_from([" ", " ", "", "\n", "  "])
TEXTS = st.lists(st.tuples(WORDS, MARKS, SPACES), min_size=1, max_size=60).map(
    lambda parts: "".join(w + m + s for w, m, s in parts)
)
PUNCTUATION = st.text(st.sampled_from(list(".!?…。！？,，:;\"'”) ")), min_size=1, max_size=120)
SPEAKABLE = re.compile(r"[^\W_]")


def squeeze(text: str) -> str:
    return "".join(text.split())


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut into consecutive pieces of the sizes in ``cuts`` (repeated), the way a stream of tokens arrives."""
    pieces, start, i = [], 0, 0
    while start < len(text):
        size = cuts[i % len(cuts)]
        pieces.append(text[start : start + size])
        start, i = start + size, i + 1
    return pieces


def streamed(pieces: list[str], *, clauses_every: int = 0) -> list[str]:
    stream = TextStream(MAX)
    chunks: list[str] = []
    for i, piece in enumerate(pieces):
        chunks += stream.feed(piece)
        if clauses_every and i % clauses_every == 0:
            chunks += stream.clauses()
    chunks += stream.close()
    assert stream.pending == ""
    return chunks


def holds_speech(chunk: str) -> bool:
    return SPEAKABLE.search(chunk) is not None


def fits(chunk: str) -> bool:
    """At most MAX characters — or MAX from its first word, for a chunk that marks alone would fill."""
    first = SPEAKABLE.search(chunk)
    return len(chunk) <= MAX or (first is not None and len(chunk) <= first.start() + MAX)


def assert_nothing_spoken_is_lost(text: str, chunks: list[str]) -> None:
    """Only whitespace, and marks after the last word, are dropped; every chunk has something to speak and fits."""
    joined, whole = squeeze("".join(chunks)), squeeze(text)
    assert whole.startswith(joined) and not holds_speech(whole[len(joined) :]), (text, chunks)
    assert all(chunk == chunk.strip() and holds_speech(chunk) for chunk in chunks), chunks
    assert all(fits(chunk) for chunk in chunks if "[" not in chunk), chunks


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.lists(st.integers(1, 12), min_size=1, max_size=40))
def test_any_split_of_a_text_gives_the_chunks_of_the_text_sent_whole(text: str, cuts: list[int]) -> None:
    whole = streamed([text])
    assert streamed(pieces_of(text, cuts)) == whole
    assert streamed(list(text)) == whole, "a character at a time"
    assert_nothing_spoken_is_lost(text, whole)


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.lists(st.integers(1, 12), min_size=1, max_size=40), st.integers(1, 5))
def test_timed_cuts_never_make_a_chunk_of_punctuation_or_lose_text(text: str, cuts: list[int], every: int) -> None:
    chunks = streamed(pieces_of(text, cuts), clauses_every=every)
    assert_nothing_spoken_is_lost(text, chunks)


@settings(max_examples=200, deadline=None)
@given(PUNCTUATION, st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_a_text_of_punctuation_alone_queues_nothing(text: str, cuts: list[int]) -> None:
    stream = TextStream(MAX)
    chunks = [chunk for piece in pieces_of(text, cuts) for chunk in stream.feed(piece)]
    assert chunks + stream.clauses() + stream.flush() + stream.close() == []


SENTENCES = st.lists(
    st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "3.5", "你好", "[uv_break]"]), min_size=3, max_size=7)
    .map(lambda words: " ".join(words) + ".")
    .filter(lambda sentence: MAX // 2 < len(sentence) <= MAX),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(SENTENCES, st.lists(st.integers(1, 12), min_size=1, max_size=40))
def test_sentences_that_each_fill_over_half_a_chunk_are_cut_as_a_submit_cuts_them(sentences: list[str], cuts: list[int]) -> None:
    """Where a submitted text's cuts fall at every sentence (no two fit in one chunk), a session's fall there too: the
    premise of its audio equalling the submit's (tests/e2e/test_realtime.py)."""
    text = " ".join(sentences)
    assert streamed(pieces_of(text, cuts)) == split_sentences(text, MAX)


def test_llm_punctuation_tokens_stay_with_their_sentence() -> None:
    assert streamed(["Really", "!", "?", " Next", " one."]) == ["Really!?", "Next one."]
    assert streamed(["Well", ".", ".", ".", " I", " see", "."]) == ["Well...", "I see."]
    assert streamed(['"yes', ".", '"', " she", " said."]) == ['"yes."', "she said."]
    assert streamed(["Really", "!", " ?", " Yes."]) == ["Really! ?", "Yes."]
    assert streamed(["...", " Hello", ".", " ?"]) == ["... Hello. ?"]


def test_a_sentence_end_at_the_end_of_what_arrived_waits_for_the_next_character() -> None:
    stream = TextStream(MAX)
    assert stream.feed("It costs 3.") == []  # "3." may be "3.5"
    assert stream.feed("5 dollars.") == []  # "." may be followed by "?" or a quote
    assert stream.feed(" ") == []
    assert stream.feed("Next") == ["It costs 3.5 dollars."]
    assert stream.feed(" one!") == []
    assert stream.clauses() == ["Next one!"], "the caller's wait ran out: a waiting end is spoken"
    assert stream.feed(" 你好。") == []
    assert stream.flush() == ["你好。"]
    assert stream.pending == ""


def test_a_sender_of_whole_sentences_has_a_sentence_that_ends_its_piece_spoken_at_once() -> None:
    """ElevenLabs' ``auto_mode`` and Cartesia's clients cut their text into sentences themselves: a sentence end at the
    very end of such a piece is final now; a piece that ends mid-sentence still waits for the rest."""
    stream = TextStream(MAX)
    assert stream.feed("It rained all day.", whole=True) == ["It rained all day."]
    assert stream.feed("We stayed", whole=True) == []
    assert stream.feed(" in. ", whole=True) == ["We stayed in."]
    assert TextStream(MAX).feed("It rained all day.") == [], "a token stream's end waits for what follows it"


def test_clauses_and_flush_speak_what_has_no_sentence_end() -> None:
    stream = TextStream(MAX)
    assert stream.feed("Well, I think that") == []
    assert stream.clauses() == ["Well,"]
    assert stream.clauses() == []  # no clause mark left
    assert stream.flush() == ["I think that"]
    assert stream.flush() == []


def test_marks_left_after_a_flush_join_the_next_words_and_are_dropped_at_close() -> None:
    stream = TextStream(MAX)
    assert stream.feed("Hello") == []
    assert stream.flush() == ["Hello"]
    assert stream.feed("!") == []
    assert stream.flush() == [], "a lone mark is not a chunk"
    assert stream.feed(" How are you?") == []
    assert stream.close() == ["! How are you?"]
    assert stream.feed("?!") == []
    assert stream.close() == [] and stream.pending == ""


def test_a_long_run_without_a_sentence_end_is_spoken_as_it_fills() -> None:
    stream = TextStream(MAX)
    chunks = []
    for word in ("word " * 30).split(" "):
        chunks += stream.feed(word + " ")
    assert chunks and all(len(chunk) <= MAX for chunk in chunks)
    assert len(stream.pending.strip()) <= MAX
    stream = TextStream(MAX)
    assert stream.feed("First, " + "x" * 50) == ["First,", "x" * MAX]  # no space to cut at: mid-word
    assert stream.pending == "x" * 10


def test_a_lone_surrogate_is_dropped_as_it_arrives() -> None:
    stream = TextStream(MAX)
    assert stream.feed("Say \ud800this. And") == ["Say this."]
    assert stream.flush() == ["And"]
