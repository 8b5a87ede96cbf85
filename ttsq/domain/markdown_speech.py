"""A Markdown document read aloud as a person would read it: the blocks a listener hears, in order, as plain text.

A Markdown document is written for the eye. Read literally, the engine would say
the syntax ("hash hash", "asterisk") and speak every URL, code listing and table cell by cell. A person reading the
page to someone does something else, and that is what this module writes down (the user's table:
``docs/markdown.md``):

* headings are said as sentences, with the pause a sentence gets, so the listener hears the structure;
* a list is read item by item, a link by its text, an image by its alt text, emphasis and code spans as their words;
* a code block or a table, which nobody reads aloud, is either skipped or announced with a short phrase;
* HTML, horizontal rules, front matter and footnotes are not said at all;
* emoji are dropped or said by their names.

The document is parsed by markdown-it-py (CommonMark, with GitHub's tables, strikethrough, task lists and bare
URLs; front matter and footnotes by its plugins) and the parser's token stream is walked. Regular expressions over
Markdown cannot do this: whether ``*`` opens emphasis, whether an indented line is code or a list's continuation,
whether ``[a](b)`` is a link inside a code span, all depend on context that only a real parser tracks, and
markdown-it-py does it in time that grows in step with the document's length, which matters for documents of 200,000
characters.

Pure: no I/O, nothing of ttsq outside ``ttsq.domain``; the API calls it on a submitted document.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal
from urllib.parse import urlsplit

from emoji import analyze
from emoji.tokenizer import EmojiMatch, EmojiMatchZWJNonRGI
from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin
from mdit_py_plugins.tasklists import tasklists_plugin

from ttsq.domain.text import CLOSERS

__all__ = [
    "CODE_PHRASE",
    "TABLE_PHRASE",
    "Block",
    "BlockKind",
    "CodePolicy",
    "EmojiPolicy",
    "markdown_blocks",
    "plain_blocks",
    "speak_emoji",
]

BlockKind = Literal["heading", "paragraph", "item", "quote", "code", "table"]
CodePolicy = Literal["phrase", "skip"]
"""What a code block or a table becomes: ``"phrase"``, one block whose text is a short phrase saying something was
skipped (so a listener knows the page had more than was read); ``"skip"``, nothing at all."""
EmojiPolicy = Literal["remove", "name"]
"""``"remove"``: emoji are deleted; ``"name"``: each is replaced by its English name ("🎉" → "party popper")."""

CODE_PHRASE = "A code block is skipped here."
"""What is said in place of a code block under the ``"phrase"`` policy, unless the caller gives another."""
TABLE_PHRASE = "A table is skipped here."
"""What is said in place of a table under the ``"phrase"`` policy, unless the caller gives another."""


@dataclass(frozen=True)
class Block:
    """One piece of a document as it is read aloud, with what it was in the document.

    ``text`` is plain text with no Markdown left in it, and never empty: it holds at least one letter, digit or
    ideograph. ``kind`` lets the caller pace the reading (a longer pause after a heading, a shorter one between
    list items). ``level`` is the heading's level (1-6) for a heading, the list nesting depth for an item (0 for
    an item of a top-level list), and 0 for every other kind.
    """

    text: str
    kind: BlockKind
    level: int = 0


SENTENCE_MARKS = ".!?;…。！？；"
"""Marks after which ``ttsq.domain.text.split_sentences`` cuts a sentence; a heading that ends in one needs no other."""
CLAUSE_MARKS = ",:，、："
"""Marks that end a clause but not a sentence: a heading ending in one ("Usage:") has it replaced by a full stop."""
HORIZONTAL_SPACE = (" ", "\t")
"""The spaces an emoji's removal tidies up; line breaks are kept, since plain text's paragraphs are made of them."""
STRAY_MARKERS = re.compile(r"`+|\*{2,}")
"""Backticks and runs of asterisks that the parser left as text (an unclosed ``**``, a lone backtick, an escaped
``\\*\\*``): they are syntax to the eye, never words, so they are not given to the engine."""


@cache
def _parser() -> MarkdownIt:
    """CommonMark plus what documents written on GitHub use: tables, strikethrough, task lists, bare URLs, front
    matter and footnotes. Made once: the parser keeps no state between documents."""
    md = MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"])
    return md.use(front_matter_plugin).use(footnote_plugin).use(tasklists_plugin)


@dataclass
class _Item:
    """A list item being read: its paragraphs' text, held until the item ends or something nested in it begins,
    so that an item's paragraphs make one block and come before its nested list."""

    level: int
    parts: list[str] = field(default_factory=list)


QUOTE: Literal["quote"] = "quote"
"""An open block quote among the containers (it holds nothing back: its paragraphs are read as they come)."""


@dataclass
class _Reading:
    """The walk over one document's tokens: the blocks read so far and the containers open around the cursor."""

    emoji: EmojiPolicy
    blocks: list[Block] = field(default_factory=list)
    containers: list[_Item | Literal["quote"]] = field(default_factory=list)
    """Open list items and block quotes, innermost last."""
    lists: int = 0

    def settle(self) -> None:
        """Read out what open items hold: an item's words come before anything nested in it."""
        for container in self.containers:
            if isinstance(container, _Item):
                self.flush(container)

    def flush(self, item: _Item) -> None:
        text, item.parts = " ".join(item.parts), []
        self.append(text, "item", item.level)

    def emit(self, text: str, kind: BlockKind, level: int = 0) -> None:
        self.settle()
        self.append(text, kind, level)

    def append(self, text: str, kind: BlockKind, level: int) -> None:
        spoken = _spoken(text, self.emoji)
        if not _has_words(spoken):
            return
        if kind == "heading":
            spoken = _as_sentence(spoken)
        self.blocks.append(Block(spoken, kind, level))

    def paragraph(self, text: str) -> None:
        """A paragraph's text goes to the innermost container: an item's, a quote's, or the document's."""
        innermost = self.containers[-1] if self.containers else None
        if isinstance(innermost, _Item):
            innermost.parts.append(text)
        else:
            self.emit(text, "paragraph" if innermost is None else "quote")


def markdown_blocks(
    source: str,
    *,
    code: CodePolicy = "phrase",
    emoji: EmojiPolicy = "remove",
    code_phrase: str = CODE_PHRASE,
    table_phrase: str = TABLE_PHRASE,
) -> list[Block]:
    """The blocks a person reading ``source`` aloud would say, in order (``docs/markdown.md`` is the user's table).

    Headings end as sentences (a full stop is added where they end in none), because the engine cuts and pauses
    at sentence ends, and a heading run into the paragraph after it would be heard as that paragraph's first
    words. Code blocks and tables follow ``code``, with ``code_phrase`` and ``table_phrase`` as what is said;
    ``emoji`` applies to every block's text. Never raises on any text: Markdown has no syntax errors, only text.
    """
    tokens = _parser().parse(source)
    reading = _Reading(emoji)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        kind = token.type
        if kind == "heading_open":
            reading.emit(_inline_text(tokens[index + 1].children), "heading", int(token.tag[1]))
            index += 3
            continue
        if kind == "paragraph_open":
            reading.paragraph(_inline_text(tokens[index + 1].children))
            index += 3
            continue
        if kind in ("bullet_list_open", "ordered_list_open"):
            reading.lists += 1
        elif kind in ("bullet_list_close", "ordered_list_close"):
            reading.lists -= 1
        elif kind == "list_item_open":
            reading.settle()
            reading.containers.append(_Item(level=reading.lists - 1))
        elif kind == "blockquote_open":
            reading.containers.append(QUOTE)
        elif kind in ("list_item_close", "blockquote_close"):
            closed = reading.containers.pop()
            if isinstance(closed, _Item):
                reading.flush(closed)
        elif kind in ("fence", "code_block"):
            if code == "phrase":
                reading.emit(code_phrase, "code")
        elif kind == "table_open":
            if code == "phrase":
                reading.emit(table_phrase, "table")
            index = _after_matching_close(tokens, index)
            continue
        elif kind == "footnote_block_open":
            index = _after_matching_close(tokens, index)
            continue
        # Everything else is not said: html_block, hr, front_matter.
        index += 1
    return reading.blocks


def plain_blocks(source: str, *, emoji: EmojiPolicy = "remove") -> list[Block]:
    """Plain text as paragraphs: split at blank lines (lines of nothing but whitespace), each paragraph's lines
    joined by spaces. Nothing else is interpreted, so a plain document's ``*`` or ``#`` are left to the engine
    as written; ``emoji`` applies as in :func:`markdown_blocks`."""
    blocks: list[Block] = []
    lines: list[str] = []
    for line in [*source.splitlines(), ""]:
        if line.strip():
            lines.append(line)
            continue
        text = " ".join(" ".join(lines).split())
        lines = []
        spoken = " ".join(speak_emoji(text, emoji).split())
        if _has_words(spoken):
            blocks.append(Block(spoken, "paragraph"))
    return blocks


def speak_emoji(text: str, policy: EmojiPolicy) -> str:
    """``text`` with its emoji removed or replaced by their English names (``"I ❤️ it"`` → ``"I red heart it"``).

    The emoji library finds them (skin tones, variation selectors, flags, keycaps and ZWJ sequences included, a
    sequence with no name of its own said as its parts' names), so what counts as one emoji follows Unicode's
    data and not a hand-kept list. A name is set off from the words beside it by one space; a removed emoji
    leaves one space where it stood between words, and none before punctuation or at either end. Everything
    else in ``text`` is kept as it was.
    """
    out: list[str] = []
    after_emoji = False
    for token in analyze(text, non_emoji=True, join_emoji=True):
        if isinstance(token.value, EmojiMatch):
            name = _emoji_name(token.value) if policy == "name" else ""
            if name:
                if _wants_space(out):
                    out.append(" ")
                out.append(name)
            after_emoji = True
            continue
        char = token.chars
        if after_emoji:
            if char in HORIZONTAL_SPACE and (not out or out[-1][-1:].isspace()):
                continue  # the space the emoji stood in is there already
            after_emoji = False
            if char.isspace() or unicodedata.category(char) in ("Pe", "Pf", "Po"):
                _drop_trailing_spaces(out)  # no space before a line break or "," ")" "."
            elif _wants_space(out):
                out.append(" ")
        out.append(char)
    if after_emoji:
        _drop_trailing_spaces(out)
    return "".join(out)


def _wants_space(out: list[str]) -> bool:
    """Whether a word put after ``out`` needs a space: not at the start, after a space or after "(" or an opening
    quote."""
    last = out[-1][-1:] if out else ""
    return bool(last) and not last.isspace() and unicodedata.category(last) not in ("Ps", "Pi")


def _drop_trailing_spaces(out: list[str]) -> None:
    while out and out[-1] in HORIZONTAL_SPACE:
        out.pop()


def _emoji_name(match: EmojiMatch) -> str:
    """An emoji's English CLDR name with spaces (``:red_heart:`` → ``red heart``); a ZWJ sequence that Unicode
    does not name as a whole is said as its parts."""
    if isinstance(match, EmojiMatchZWJNonRGI):
        return " ".join(_emoji_name(part) for part in match.emojis)
    data = match.data or {}
    return str(data.get("en", "")).strip(":").replace("_", " ")


def _after_matching_close(tokens: Sequence[Token], index: int) -> int:
    """The index after the token that closes ``tokens[index]``: what lies between is passed over unread."""
    depth = 0
    for position in range(index, len(tokens)):
        depth += tokens[position].nesting
        if depth == 0:
            return position + 1
    return len(tokens)


def _inline_text(children: Sequence[Token] | None) -> str:
    """The words of a run of inline tokens: text, code spans' contents, links' and images' text; markers, HTML
    and footnote references add nothing, and line breaks are spaces."""
    tokens = children or []
    parts: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type in ("text", "text_special", "code_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.type == "image":
            parts.append(_inline_text(token.children))
        elif token.type == "link_open":
            close = index + 1
            while close < len(tokens) and tokens[close].type != "link_close":
                close += 1
            written = _inline_text(tokens[index + 1 : close])
            href = str(token.attrs.get("href", ""))
            said_as_address = token.info == "auto" or ("://" in written and written.strip() == href)
            parts.append(_spoken_address(written, href) if said_as_address else written)
            index = close
        index += 1
    return "".join(parts)


def _spoken_address(written: str, href: str) -> str:
    """An address written out in the text (an autolink, a bare URL, a link whose text is its own URL) is said as
    its host, without ``www.``: "example.com" tells a listener where the link goes, and the path and query,
    spelled out character by character, tell them nothing. An e-mail address is said as written; an address
    with no host (``urn:...``) is not said.

    The link's target says which of these it is; the host is taken from the text as written, since the parser
    writes the target's host in punycode (``xn--mnchen-3ya.de`` for ``münchen.de``) and in lower case."""
    written = written.strip()
    try:
        target = urlsplit(href)
        if target.scheme.lower() == "mailto":
            return written[len("mailto:") :] if written.lower().startswith("mailto:") else written
        if not target.netloc:
            return ""
        host = urlsplit(written if "://" in written else f"//{written}").hostname or ""
    except ValueError:
        return ""
    at = written.lower().find(host)
    if host and at >= 0 and written[at : at + len(host)].lower() == host:
        host = written[at : at + len(host)]  # as written: "GitHub.com", not "github.com"
    return host[4:] if host.lower().startswith("www.") else host


def _spoken(text: str, emoji: EmojiPolicy) -> str:
    """A block's text as the engine gets it: emoji handled, stray markers dropped, whitespace collapsed."""
    text = STRAY_MARKERS.sub(" ", speak_emoji(text, emoji)).replace("](", "] (")
    return " ".join(text.split())


def _has_words(text: str) -> bool:
    """Whether there is anything to say: a letter, a digit or an ideograph (punctuation alone is silence)."""
    return any(char.isalnum() for char in text)


def _as_sentence(text: str) -> str:
    """A heading ending in a sentence mark as it is; one ending in a clause mark or none gets a full stop (an
    ideographic one after CJK text), so the engine ends the sentence there."""
    core = text.rstrip(CLOSERS)
    if core and core[-1] in SENTENCE_MARKS:
        return text
    if core == text and core and core[-1] in CLAUSE_MARKS:
        text = core = core.rstrip(CLAUSE_MARKS)
    last = core[-1:] or text[-1:]
    return text + ("。" if last and unicodedata.east_asian_width(last) in ("W", "F") else ".")
