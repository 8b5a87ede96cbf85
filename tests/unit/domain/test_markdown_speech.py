"""Tests for ttsq.domain.markdown_speech: a Markdown document read aloud as a person would read it.

One test (or one parametrised table) per rule of docs/markdown.md, each on a small document with the exact blocks
expected, then properties over arbitrary text: nothing raises, and no block carries Markdown syntax, an empty text
or unspoken whitespace.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttsq.domain.markdown_speech import (
    CODE_PHRASE,
    TABLE_PHRASE,
    Block,
    EmojiPolicy,
    markdown_blocks,
    plain_blocks,
    speak_emoji,
)


def paragraph(text: str) -> list[Block]:
    return [Block(text, "paragraph")]


# Headings


@pytest.mark.parametrize("level", range(1, 7))
def test_a_heading_is_its_text_as_a_sentence_with_its_level(level: int) -> None:
    assert markdown_blocks("#" * level + " Getting *started*") == [Block("Getting started.", "heading", level)]


def test_setext_headings_are_headings_too() -> None:
    assert markdown_blocks("Title\n=====\n\nPart\n----") == [Block("Title.", "heading", 1), Block("Part.", "heading", 2)]


@pytest.mark.parametrize(
    ("source", "spoken"),
    [
        ("# Done!", "Done!"),
        ("# Why?", "Why?"),
        ("# The end.", "The end."),
        ("# And so…", "And so…"),
        ('# "Why?"', '"Why?"'),
        ('# Say "hi"', 'Say "hi".'),
        ("# Usage:", "Usage."),
        ("# First,", "First."),
        ("# 概述", "概述。"),
        ("# 完成！", "完成！"),
        ("# 版本 2", "版本 2."),
    ],
)
def test_a_heading_ends_in_exactly_one_sentence_mark(source: str, spoken: str) -> None:
    """A mark the engine cuts a sentence at is kept; a clause mark is replaced; none gets a full stop (an ideographic
    one after CJK)."""
    assert markdown_blocks(source) == [Block(spoken, "heading", 1)]


def test_a_heading_is_followed_by_its_paragraph_as_a_separate_block() -> None:
    assert markdown_blocks("# Intro\nThe text.") == [Block("Intro.", "heading", 1), *paragraph("The text.")]


# Paragraphs and line breaks


def test_a_paragraphs_soft_line_breaks_are_spaces() -> None:
    assert markdown_blocks("one\ntwo\nthree") == paragraph("one two three")


@pytest.mark.parametrize("source", ["one  \ntwo", "one\\\ntwo"])
def test_a_hard_line_break_is_a_space(source: str) -> None:
    assert markdown_blocks(source) == paragraph("one two")


def test_paragraphs_are_blocks_in_order() -> None:
    assert markdown_blocks("First.\n\nSecond.") == [*paragraph("First."), *paragraph("Second.")]


def test_whitespace_is_collapsed() -> None:
    assert markdown_blocks("  a \t  b\u00a0\u00a0c  ") == paragraph("a b c")


@pytest.mark.parametrize("source", ["...", "# ***", "!!!\n\n---\n\n- ?", "", "   \n\n  "])
def test_a_block_with_nothing_to_say_is_not_returned(source: str) -> None:
    assert markdown_blocks(source) == []


# Lists


def test_a_list_is_read_item_by_item() -> None:
    assert markdown_blocks("- apples\n- *pears*\n* plums") == [
        Block("apples", "item"),
        Block("pears", "item"),
        Block("plums", "item"),
    ]


def test_an_ordered_list_keeps_no_numbers() -> None:
    assert markdown_blocks("1. first\n2. second\n10) tenth") == [
        Block("first", "item"),
        Block("second", "item"),
        Block("tenth", "item"),
    ]


def test_nested_items_carry_their_depth_and_follow_their_parent() -> None:
    source = "- top\n  - middle\n    1. bottom\n  - middle again\n- top again"
    assert markdown_blocks(source) == [
        Block("top", "item", 0),
        Block("middle", "item", 1),
        Block("bottom", "item", 2),
        Block("middle again", "item", 1),
        Block("top again", "item", 0),
    ]


def test_an_items_paragraphs_are_one_block() -> None:
    assert markdown_blocks("- first line\n\n  second paragraph\n- next") == [
        Block("first line second paragraph", "item"),
        Block("next", "item"),
    ]


def test_a_quote_inside_an_item_comes_after_the_items_words() -> None:
    assert markdown_blocks("- intro\n\n  > quoted\n\n  outro\n- next") == [
        Block("intro", "item"),
        Block("quoted", "quote"),
        Block("outro", "item"),
        Block("next", "item"),
    ]


def test_task_list_markers_are_not_said() -> None:
    assert markdown_blocks("- [ ] to do\n- [x] done\n1. [X] also done") == [
        Block("to do", "item"),
        Block("done", "item"),
        Block("also done", "item"),
    ]


def test_an_empty_item_is_not_returned() -> None:
    assert markdown_blocks("- a\n-\n- b") == [Block("a", "item"), Block("b", "item")]


# Block quotes


def test_a_quotes_paragraphs_are_quote_blocks() -> None:
    assert markdown_blocks("> said *this*\n> and that\n>\n> then more\n\nafter") == [
        Block("said this and that", "quote"),
        Block("then more", "quote"),
        *paragraph("after"),
    ]


def test_a_nested_quote_is_a_quote_and_a_list_in_a_quote_is_items() -> None:
    assert markdown_blocks("> outer\n>\n> > inner\n>\n> - point") == [
        Block("outer", "quote"),
        Block("inner", "quote"),
        Block("point", "item"),
    ]


# Links and images


@pytest.mark.parametrize(
    ("source", "spoken"),
    [
        ("See [the docs](https://example.com/docs) now.", "See the docs now."),
        ("See [the *fine* docs][ref].\n\n[ref]: https://example.com", "See the fine docs."),
        ("A ![red *car*](car.png) here.", "A red car here."),
        ("A ![](car.png) here.", "A here."),
        ("A [![logo](l.png)](https://x.com) here.", "A logo here."),
    ],
)
def test_links_are_their_text_and_images_their_alt_text(source: str, spoken: str) -> None:
    assert markdown_blocks(source) == paragraph(spoken)


def test_an_image_with_no_alt_text_alone_says_nothing() -> None:
    assert markdown_blocks("![](picture.png)") == []


@pytest.mark.parametrize(
    ("source", "spoken"),
    [
        ("Go to <https://www.example.com/a/b?c=1> now.", "Go to example.com now."),
        ("Go to https://docs.python.org/3/library/ now.", "Go to docs.python.org now."),
        ("Go to www.GitHub.com/ttsq now.", "Go to GitHub.com now."),
        ("Go to https://münchen.de/karte now.", "Go to münchen.de now."),
        ("Go to [https://x.org/a/b](https://x.org/a/b) now.", "Go to x.org now."),
        ("Write to <mailto:me@example.com> now.", "Write to me@example.com now."),
        ("Write to me@example.com now.", "Write to me@example.com now."),
        ("Cite <urn:isbn:0451450523> now.", "Cite now."),
    ],
)
def test_an_address_written_out_is_said_as_its_host(source: str, spoken: str) -> None:
    """Autolinks, bare URLs and links whose text is their own URL: the host (no www.), never the path."""
    assert markdown_blocks(source) == paragraph(spoken)


# Inline markers


def test_emphasis_strong_strikethrough_and_code_spans_are_their_words() -> None:
    source = "*one* _two_ **three** __four__ ***five*** ~~six~~ `seven(8)` ``nine ` ten``"
    assert markdown_blocks(source) == paragraph("one two three four five six seven(8) nine ten")


def test_markers_the_parser_leaves_as_text_are_not_said() -> None:
    """An unclosed ``**``, an escaped one, a lone backtick and a broken link's ``](`` are syntax, not words; a
    single ``*`` (arithmetic) is kept."""
    source = "**open and \\*\\*escaped\\*\\* and a ` tick and [broken](link and 2 * 3"
    assert markdown_blocks(source) == paragraph("open and escaped and a tick and [broken] (link and 2 * 3")


def test_chattts_prosody_tokens_in_brackets_pass_through() -> None:
    """A bracket with no link definition is text to CommonMark, so a document can still pace itself."""
    assert markdown_blocks("Wait [uv_break] for it [laugh].") == paragraph("Wait [uv_break] for it [laugh].")


# What is not said


def test_html_blocks_are_dropped_and_inline_html_keeps_only_its_text() -> None:
    source = '<div class="note">\nhidden\n</div>\n\nShown <b>bold</b> and <br/> <!-- comment --> text.'
    assert markdown_blocks(source) == paragraph("Shown bold and text.")


def test_horizontal_rules_say_nothing() -> None:
    assert markdown_blocks("before\n\n---\n\n***\n\n___\n\nafter") == [*paragraph("before"), *paragraph("after")]


def test_front_matter_says_nothing() -> None:
    """Without the front-matter rule the block would read as a rule and a setext heading "title: Notes"."""
    assert markdown_blocks("---\ntitle: Notes\ntags: [a, b]\n---\n# Notes\n\nBody.") == [
        Block("Notes.", "heading", 1),
        *paragraph("Body."),
    ]


def test_only_a_leading_block_is_front_matter() -> None:
    assert markdown_blocks("Body.\n\n---\nnot: front matter\n---\n") == [
        *paragraph("Body."),
        Block("not: front matter.", "heading", 2),
    ]


def test_footnote_references_and_definitions_are_not_said() -> None:
    source = "A claim[^1] and another^[inline note].\n\n[^1]: The source, which is not read."
    assert markdown_blocks(source) == paragraph("A claim and another.")


# Code blocks and tables


FENCED = "Before.\n\n```python\nprint('hi')\n```\n\nAfter."
INDENTED = "Before.\n\n    print('hi')\n\nAfter."
TABLE = "Before.\n\n| Name | Cost |\n|------|-----:|\n| tea  | 3    |\n\nAfter."


@pytest.mark.parametrize("source", [FENCED, INDENTED, "Before.\n\n~~~\nx = 1\n~~~\n\nAfter."])
def test_a_code_block_is_the_code_phrase_by_default(source: str) -> None:
    assert markdown_blocks(source) == [*paragraph("Before."), Block(CODE_PHRASE, "code"), *paragraph("After.")]


@pytest.mark.parametrize("source", [FENCED, INDENTED, TABLE])
def test_code_skip_says_nothing_for_code_and_tables(source: str) -> None:
    assert markdown_blocks(source, code="skip") == [*paragraph("Before."), *paragraph("After.")]


def test_a_table_is_the_table_phrase_and_none_of_its_cells() -> None:
    assert markdown_blocks(TABLE) == [*paragraph("Before."), Block(TABLE_PHRASE, "table"), *paragraph("After.")]


def test_the_phrases_can_be_given() -> None:
    assert markdown_blocks(FENCED + "\n\n" + TABLE, code_phrase="Code omitted.", table_phrase="Table omitted.") == [
        *paragraph("Before."),
        Block("Code omitted.", "code"),
        *paragraph("After."),
        *paragraph("Before."),
        Block("Table omitted.", "table"),
        *paragraph("After."),
    ]


def test_code_inside_a_list_item_comes_after_the_items_words() -> None:
    assert markdown_blocks("- run this:\n\n  ```\n  make\n  ```\n- done") == [
        Block("run this:", "item"),
        Block(CODE_PHRASE, "code"),
        Block("done", "item"),
    ]


def test_the_documented_phrases() -> None:
    """docs/markdown.md quotes them."""
    assert (CODE_PHRASE, TABLE_PHRASE) == ("A code block is skipped here.", "A table is skipped here.")


# Emoji


@pytest.mark.parametrize(
    ("text", "named", "removed"),
    [
        ("I ❤️ it", "I red heart it", "I it"),
        ("I ❤ it", "I red heart it", "I it"),
        ("I❤️it", "I red heart it", "I it"),
        ("🎉 Released", "party popper Released", "Released"),
        ("Released 🎉", "Released party popper", "Released"),
        ("Released 🎉.", "Released party popper.", "Released."),
        ("Released (🎉)", "Released (party popper)", "Released ()"),
        ("🎉🎉", "party popper party popper", ""),
        ("👍🏽", "thumbs up medium skin tone", ""),
        ("👨‍👩‍👧", "family man woman girl", ""),
        ("👨‍🦲‍🎉", "man bald party popper", ""),
        ("🇯🇵 1️⃣", "Japan keycap 1", ""),
        ("line ❤️\nnext", "line red heart\nnext", "line\nnext"),
        ("no  emoji\n\nhere", "no  emoji\n\nhere", "no  emoji\n\nhere"),
    ],
)
def test_speak_emoji(text: str, named: str, removed: str) -> None:
    assert (speak_emoji(text, "name"), speak_emoji(text, "remove")) == (named, removed)


def test_the_emoji_policy_applies_to_every_block() -> None:
    source = "# Launch 🚀\n\nWe did it 🎉\n\n- tests ✅\n\n> well done 👏"
    assert markdown_blocks(source, emoji="name") == [
        Block("Launch rocket.", "heading", 1),
        *paragraph("We did it party popper"),
        Block("tests check mark button", "item"),
        Block("well done clapping hands", "quote"),
    ]
    assert markdown_blocks(source) == [
        Block("Launch.", "heading", 1),
        *paragraph("We did it"),
        Block("tests", "item"),
        Block("well done", "quote"),
    ]


def test_a_block_of_emoji_alone_is_said_only_by_name() -> None:
    assert markdown_blocks("🎉🎉") == []
    assert markdown_blocks("🎉🎉", emoji="name") == paragraph("party popper party popper")


# Plain text


def test_plain_text_is_split_at_blank_lines() -> None:
    source = "First line\nstill first.\n\n\nSecond.\n   \t\nThird\r\nends."
    assert plain_blocks(source) == [*paragraph("First line still first."), *paragraph("Second."), *paragraph("Third ends.")]


def test_plain_text_is_not_read_as_markdown() -> None:
    assert plain_blocks("# not a heading\n- not an item\n**as written**") == paragraph(
        "# not a heading - not an item **as written**"
    )


def test_plain_text_follows_the_emoji_policy() -> None:
    assert plain_blocks("Hi 👋\n\n🎉") == paragraph("Hi")
    assert plain_blocks("Hi 👋\n\n🎉", emoji="name") == [*paragraph("Hi waving hand"), *paragraph("party popper")]


# Whole documents


def test_a_long_document_is_read_whole() -> None:
    """Documents reach 200,000 characters: the parse is linear, and every section of such a document is read."""
    section = (
        "## Part {n}\n\nSome *text* with a [link](https://example.com/{n}) and 🎉, `code`.\n\n"
        "- one\n- two\n  - nested\n\n```\nprint({n})\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n\n"
    )
    parts: list[str] = []
    while sum(map(len, parts)) < 200_000:
        parts.append(section.format(n=len(parts)))
    document = "".join(parts)[:200_000]
    blocks = markdown_blocks(document)
    headings = [block for block in blocks if block.kind == "heading"]
    assert len(headings) == document.count("## Part ")
    assert headings[-1].text == f"Part {len(headings) - 1}."
    assert 0 < sum(len(block.text) for block in blocks) < len(document)
    assert not [block for block in blocks if "print(" in block.text or "| a |" in block.text]


# Properties

PIECES = [*"*_`~[]()!#>-+|:\\<>&/.=\n\n  \t1aZ中", "**", "](", "```", "- [ ] ", "https://", "www.", "🎉", "❤️", "\u200d"]
MARKDOWNISH = st.lists(st.sampled_from(PIECES), max_size=120).map("".join)
"""Text made of Markdown's syntax, so that the parser's every path is walked, not only plain words."""


def _assert_speakable(blocks: list[Block]) -> None:
    for block in blocks:
        assert block.text == " ".join(block.text.split()) != ""
        assert any(char.isalnum() for char in block.text)
        assert "**" not in block.text and "`" not in block.text and "](" not in block.text
        if block.kind == "heading":
            assert 1 <= block.level <= 6
        elif block.kind == "item":
            assert block.level >= 0
        else:
            assert block.level == 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(source=st.one_of(MARKDOWNISH, st.text(max_size=200)), code=st.sampled_from(["phrase", "skip"]))
def test_any_text_reads_as_blocks_with_no_markdown_left(source: str, code: str) -> None:
    _assert_speakable(markdown_blocks(source, code="skip" if code == "skip" else "phrase"))
    _assert_speakable(markdown_blocks(source, emoji="name"))


LINE = st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp", "Cs")), min_size=1, max_size=40).filter(str.strip)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lines=st.lists(st.one_of(LINE, st.sampled_from(["🎉", "I ❤️ it", "***"])), min_size=1, max_size=6))
def test_plain_text_without_blank_lines_is_one_block(lines: list[str]) -> None:
    source = "\n".join(lines)
    policies: tuple[EmojiPolicy, ...] = ("remove", "name")
    for policy in policies:
        expected = " ".join(speak_emoji(" ".join(source.split()), policy).split())
        blocks = plain_blocks(source, emoji=policy)
        if any(char.isalnum() for char in expected):
            assert blocks == paragraph(expected)
        else:
            assert blocks == []
