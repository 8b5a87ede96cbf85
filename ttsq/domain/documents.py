"""Whole documents: a long text (plain, or Markdown read as a person reads it) cut into the parts a worker speaks one
after another.

A submit with ``"document": true`` may carry up to ``MAX_DOCUMENT_CHARS``. Its text is read into blocks
(:mod:`ttsq.domain.markdown_speech`: headings, paragraphs, list items, quotes), and each block is cut at sentence ends
into parts of at most ``DOCUMENT_PART_CHARS``: each part is one of the job's segments (:mod:`ttsq.domain.segments`),
so it is one engine request, prepared (normalised) and synthesised on its own. That is what lets a worker take a
document a few parts at a time (``DOCUMENT_PARTS_IN_FLIGHT``), keep the finished ones in the job's audio stream, and
after its death let the next attempt go on from the first part not finished (:mod:`ttsq.runtime.documents`): one
call that normalised a whole document held the worker's event loop off its lease renewals for seconds.

The structure a reader hears is silence, exact and documented (:data:`PAUSE_MS`): a longer pause around a heading, a
paragraph's pause between blocks, a short one between list items; the parts a long block is cut into are joined with
the usual gap between sentences.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from ttsq.domain.markdown_speech import Block, BlockKind, CodePolicy, EmojiPolicy, markdown_blocks, plain_blocks
from ttsq.domain.segments import NOTHING_TO_READ, PAUSE_SAMPLE_RATE, Segment, VoiceFields, speakable
from ttsq.domain.text import TextError, split_sentences, validate_text

__all__ = ["PAUSE_MS", "TextFormat", "document_segments", "pause_before", "read_document"]

TextFormat = Literal["plain", "markdown"]

PAUSE_MS: dict[str, int] = {
    "heading": 700,
    "after_heading": 500,
    "paragraph": 400,
    "quote": 400,
    "code": 400,
    "table": 400,
    "item": 250,
}
"""Silence before a block, by its kind (``after_heading``: before any block that follows a heading): where a reader
would pause longer than between two sentences."""


def read_document(source: str, text_format: TextFormat, max_chars: int, *, code: CodePolicy, emoji: EmojiPolicy) -> list[Block]:
    """The blocks a document is read as, each cleaned and checked as any text is (:func:`ttsq.domain.text.validate_text`),
    those with nothing to say left out; :class:`~ttsq.domain.text.TextError` for a document over ``max_chars`` (as sent,
    and its blocks together once read) or with nothing to say at all."""
    if len(source) > max_chars:
        raise TextError(f"text is {len(source)} characters long as sent; the limit is {max_chars}")
    markdown = text_format == "markdown"
    blocks = markdown_blocks(source, code=code, emoji=emoji) if markdown else plain_blocks(source, emoji=emoji)
    kept: list[Block] = []
    for block in blocks:
        if not speakable(block.text):
            continue
        kept.append(replace(block, text=validate_text(block.text, max_chars)))
    if not kept:
        raise TextError(NOTHING_TO_READ)
    length = sum(len(block.text) for block in kept)
    if length > max_chars:
        raise TextError(f"text reads as {length} characters once read as a document; the limit is {max_chars}")
    return kept


def pause_before(kind: BlockKind, previous: BlockKind | None) -> int | None:
    """Samples of silence before a block of ``kind`` that follows one of ``previous`` (None: the document's first
    block, which starts at once)."""
    if previous is None:
        return None
    if kind == "heading":
        ms = PAUSE_MS["heading"]
    elif previous == "heading":
        ms = PAUSE_MS["after_heading"]
    else:
        ms = PAUSE_MS[kind]
    return ms * PAUSE_SAMPLE_RATE // 1000


def document_segments(blocks: Sequence[Block], part_chars: int, voice: VoiceFields) -> list[Segment]:
    """The document's segments: every block cut at sentence ends into parts of at most ``part_chars`` characters, each
    in ``voice``; the first part of a block carries the block's pause (:func:`pause_before`), the others the usual
    gap. Blocks must hold something to say (:func:`ttsq.domain.segments.speakable`): the reader drops the others."""
    own = {name: getattr(voice, name) for name in VoiceFields.model_fields}
    segments: list[Segment] = []
    previous: BlockKind | None = None
    for block in blocks:
        pause = pause_before(block.kind, previous)
        for number, text in enumerate(split_sentences(block.text, part_chars)):
            segments.append(Segment.model_construct(text=text, pause_samples=pause if number == 0 else None, **own))
        previous = block.kind
    return segments
