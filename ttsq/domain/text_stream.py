"""Text that arrives in pieces — an LLM's reply, token by token — cut into synthesis chunks as each completes.

Apart from :mod:`ttsq.domain.text` (what a whole text may hold and how it is split) because a stream's cuts follow a
rule of their own: where a cut falls depends on the text only, never on how it was split into pieces.
"""

from __future__ import annotations

import re

from ttsq.domain.text import (
    CLOSERS,
    LONE_SURROGATE,
    MIN_SPLIT_CHARS,
    WHITESPACE_RUN,
    is_clause_end,
    is_sentence_end,
)

_SENTENCE_MARKS = "。！？；…!?;."
_CLAUSE_MARKS = "，、,：:"
_STREAM_SENTENCE_END = re.compile(
    f"[{_SENTENCE_MARKS}]+[{re.escape(CLOSERS)}]*(?:\\s*[{_SENTENCE_MARKS}]+[{re.escape(CLOSERS)}]*)*"
)
"""A sentence end as a stream is cut at: its marks and closing quotes, and the marks that follow them after a space
("Really! ?", ". . ."), which belong to it as much as those that follow at once."""
_STREAM_CLAUSE_END = re.compile(f"[{_CLAUSE_MARKS}]+[{re.escape(CLOSERS)}]*")
_SPEAKABLE = re.compile(r"[^\W_]")
"""A letter or a digit, of any script: what a chunk must hold to be worth a task (punctuation alone is not spoken, and
the model fills a text of only marks with tens of seconds of noise)."""
_NON_SPACE = re.compile(r"\S")
_OPEN_TOKEN = re.compile(r"\[[A-Za-z0-9_]*$")
"""A control token that may not have ended yet where a cut would fall (``[uv_br``)."""
_MARKS = frozenset(_SENTENCE_MARKS + _CLAUSE_MARKS)


class TextStream:
    """Text that arrives in pieces (an LLM's reply, token by token), cut into synthesis chunks as they complete.

    Where a cut falls depends on the text only, never on how it was split into pieces: a text fed a character at a
    time gives the chunks it gives fed whole (the two timed ways out below aside). LLMs send punctuation as tokens of
    its own (``Really`` ``!`` ``?``; ``"yes`` ``.`` ``"``), so a sentence end is final only once a character that
    cannot belong to it follows: one at the very end of what has arrived waits (for the next piece, or a timed way
    out). The rules, left to right:

    * a chunk ends after each sentence end (``.`` ``!`` ``?`` ``;`` ``…`` and their full-width forms, with the
      closing quotes and brackets after them and any marks that follow after a space), as
      :func:`split_sentences` cuts; a period inside a word or number ("3.5", "e.g.x") is not one;
    * a sentence longer than ``max_chars`` is cut within its first ``max_chars`` characters: after its last clause
      mark there (``,`` ``:`` ``、`` ``，``), else at its last space, else mid-word (off a control token);
    * a chunk holds at least one letter or digit: marks with nothing to speak before them (a reply that starts with
      "..." or a stray "?") join the chunk after them, and a text of marks alone is never spoken.

    Sentences are not merged into longer chunks as :func:`split_sentences` merges a submitted text's (that would
    make a chunk wait for the next sentence to end), so a session's chunks are the submit route's wherever its
    cuts fall at every sentence. The timed ways out, for text whose sentence has not ended: :meth:`clauses` (the
    caller's wait ran out: speak up to the last sentence end or clause mark) and :meth:`flush` (speak everything now);
    :meth:`close` is a flush that also drops what is left with nothing to speak. Nothing but whitespace at chunk edges,
    and marks with no words after the last chunk, is dropped.
    """

    def __init__(self, max_chars: int) -> None:
        if max_chars < MIN_SPLIT_CHARS:
            raise ValueError(f"max_chars must be at least {MIN_SPLIT_CHARS}, got {max_chars}")
        self.max_chars = max_chars
        self.pending = ""
        """Text received and not yet cut into a chunk."""
        self._silent = 0
        """How many of :attr:`pending`'s first characters are known to hold no letter or digit: a flood of marks is
        searched once, not again at every piece."""

    @property
    def has_speech(self) -> bool:
        """Whether the text not yet cut holds anything to speak (a letter or a digit)."""
        return self._speech() is not None

    def _speech(self) -> re.Match[str] | None:
        """The first letter or digit of :attr:`pending`."""
        found = _SPEAKABLE.search(self.pending, self._silent)
        if found is None:
            self._silent = len(self.pending)
        return found

    def _keep(self, pending: str) -> None:
        self.pending, self._silent = pending, 0

    def feed(self, piece: str, whole: bool = False) -> list[str]:
        """Add ``piece``; the chunks it completes. A lone surrogate (JSON may carry one; no encoding can) is dropped
        as it arrives: it is never spoken, and a chunk holding it could not be sent back as UTF-8.

        ``whole``: the sender sends whole sentences (a client that cuts its text itself, as the ElevenLabs protocol's
        ``auto_mode`` says and Cartesia's clients do), so a sentence end at the very end of ``piece`` is final now:
        no mark or quote of the same sentence can follow it in another piece."""
        if not piece.isprintable():
            piece = LONE_SURROGATE.sub("", piece)
        self.pending += piece
        return self._cut(final=False, ends_whole=whole)

    def clauses(self) -> list[str]:
        """The chunks up to the last sentence end or clause mark (",", "、", ":"), for text whose sentence is slow to
        end or whose last sentence end is still waiting for what follows it."""
        end = self._last_mark()
        if end == 0:
            return []
        rest = self.pending[end:]
        self._keep(self.pending[:end])
        chunks = self._cut(final=True)
        self._keep(self.pending + rest)
        return chunks

    def flush(self) -> list[str]:
        """Every chunk of what has arrived, complete or not. Marks with nothing to speak stay, to join what comes next."""
        return self._cut(final=True)

    def close(self) -> list[str]:
        """The text has ended: every chunk of what has arrived; what is left has nothing to speak, and is dropped."""
        chunks = self._cut(final=True)
        self._keep("")
        return chunks

    def _cut(self, final: bool, ends_whole: bool = False) -> list[str]:
        """Take the chunks that the text received so far completes (``final``: all of it is there; ``ends_whole``: a
        sentence end at its very end is final)."""
        chunks: list[str] = []
        while (speech := self._speech()) is not None:
            text = self.pending
            start = len(text) - len(text.lstrip())
            first = speech.start()
            # The chunk's room: max_chars from its start, or from its first word where marks alone fill that.
            limit = start + self.max_chars if first < start + self.max_chars else first + self.max_chars
            end = self._sentence_end(text, first, final or ends_whole)
            if end is not None and end <= limit:
                cut = end
            elif _NON_SPACE.search(text, limit) is not None:
                cut = self._long_cut(text, first, limit)
            elif final:
                cut = len(text)
            else:
                break
            chunks.append(text[:cut].strip())
            self._keep(text[cut:])
        return chunks

    @staticmethod
    def _sentence_end(text: str, first: int, final: bool) -> int | None:
        """Where the first sentence with something to speak (``first``: its first letter or digit) ends, once that
        is final: a character that cannot belong to its end follows it, or (``final``) the text has ended."""
        for match in _STREAM_SENTENCE_END.finditer(text, first):
            if not is_sentence_end(match):
                continue
            if final or _NON_SPACE.search(text, match.end()) is not None:
                return match.end()
            return None  # the last thing received: another mark or a quote may still join it
        return None

    @staticmethod
    def _long_cut(text: str, first: int, limit: int) -> int:
        """Where a sentence that does not fit before ``limit`` is cut: after the last clause mark, else at the last
        space before a word, else at ``limit`` (moved before a control token it would split) — always after ``first``,
        so the chunk has something to speak. What decides it lies before ``limit`` or is the first character past it."""
        cut = 0
        for match in _STREAM_CLAUSE_END.finditer(text, first):
            if match.end() > limit:
                break
            if is_clause_end(match):
                cut = match.end()
        if cut:
            return cut
        for match in WHITESPACE_RUN.finditer(text, first):
            if match.start() > limit:
                break
            if text[match.end() : match.end() + 1] not in _MARKS:
                cut = match.start()
        if cut:
            return cut
        token = _OPEN_TOKEN.search(text, first + 1, limit)
        return token.start() if token is not None else limit

    def _last_mark(self) -> int:
        """The end of the last sentence end or clause mark with something to speak before it; 0 when there is none."""
        speech = self._speech()
        if speech is None:
            return 0
        last = 0
        for pattern, accept in ((_STREAM_SENTENCE_END, is_sentence_end), (_STREAM_CLAUSE_END, is_clause_end)):
            for match in pattern.finditer(self.pending, speech.start()):
                if accept(match):
                    last = max(last, match.end())
        return last
