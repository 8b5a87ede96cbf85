"""Captions: one cue per synthesised chunk, timed by the joined audio itself, and their SRT/WebVTT text.

The worker joins a job's chunks (:class:`ttsq.domain.audio.ChunkJoiner`) and so knows exactly where each
chunk's samples start and end in the result: cue times are those sample positions, kept as whole samples (so
they add up exactly) and turned into seconds only when written out. A cue's text is the chunk as the model
spoke it (after normalisation; refined text when ``refine_text`` asked for it), without ChatTTS's control
tokens. Where that text appears in the caller's text as it was accepted (after invisible and control
characters were removed), the cue also carries its character offsets there; a normaliser that rewrote
the chunk ("3" → "three") leaves them unset.

A job of segments (:mod:`ttsq.domain.segments`: a dialogue's lines) has cues that say which segment they speak and
who speaks it (WebVTT's ``<v Speaker>``, SRT's ``Speaker:``), with offsets in that segment's text; a segment's marks
ride the cue they fall in (or the nearest before), each with its exact sample offset in the audio.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ttsq.domain.stored import StoredList

__all__ = ["Cue", "CueMark", "captions", "segment_captions", "source_spans", "spoken_text", "srt", "vtt"]


class CueMark(BaseModel):
    """A named mark of a segment's text (:class:`ttsq.domain.segments.Mark`), at its exact place in the audio."""

    model_config = ConfigDict(frozen=True)

    name: str
    sample: int
    """Where it stands in the joined audio: where the speech after it begins (at a segment's end: where its speech ends)."""


class Cue(BaseModel):
    """One chunk's place in the joined audio (in samples, ``end`` exclusive) and its text. Seconds need the sample
    rate, which the audio's owner (:data:`ttsq.domain.audio.SAMPLE_RATE`) passes in."""

    model_config = ConfigDict(frozen=True)

    index: int
    start: int
    end: int
    text: str
    source_start: int | None = None
    """Offset of the chunk's text in the caller's (accepted) text — in its segment's text, for a job of segments;
    None where normalisation rewrote it."""
    source_end: int | None = None
    segment: int | None = None
    """The segment it speaks (a dialogue's line), for a job of segments; None for a plain text."""
    speaker: str | None = None
    """Who speaks it (a dialogue's speaker), where its segment names one."""
    marks: StoredList[CueMark] | None = None
    """The marks that fall in it (or after it, before the next cue), in order; None when there are none."""

    def as_json(self, sample_rate: int) -> dict[str, object]:
        """The cue as ``?format=json`` lists it: seconds for players, samples for exact arithmetic (marks too)."""
        shown = self.model_dump()
        for name in ("segment", "speaker", "marks"):  # a plain text's cues are listed as they always were
            if shown[name] is None:
                del shown[name]
        for mark in shown.get("marks", ()):
            mark["s"] = mark["sample"] / sample_rate
        return {"start_s": self.start / sample_rate, "end_s": self.end / sample_rate, **shown}


_CONTROL_TOKEN = re.compile(r"\[[A-Za-z0-9_]+\]")
"""A ChatTTS control token as a chunk's text carries it (``[uv_break]``, ``[laugh_1]``): steering, not words."""


def spoken_text(text: str) -> str:
    """A chunk's text as a caption shows it: its control tokens removed (they are not heard as words), spaces
    collapsed."""
    return " ".join(_CONTROL_TOKEN.sub(" ", text).split())


def source_spans(source: str, texts: Sequence[str]) -> list[tuple[int, int] | None]:
    """Where each of ``texts`` (in order) lies in ``source``, or None for one that does not appear as it is.

    Chunks come from splitting ``source`` in order, so each is looked for after the previous one. Right after a chunk
    found (or at the start) only spaces and punctuation may come before the next: a rewritten chunk ("2 cats" spoken
    as "two cats") must not be pinned on a later sentence that happens to read like it. After a chunk that was not
    found, where it ended is unknown: the next is placed only where it occurs once in the rest of the text.
    """
    spans: list[tuple[int, int] | None] = []
    cursor = 0
    lost = False
    for chunk in texts:
        at = source.find(chunk, cursor) if chunk else -1
        if at >= 0 and not lost and any(char.isalnum() for char in source[cursor:at]):
            at = -1  # words of the caller's text lie between: this is another sentence, not this chunk
        elif at >= 0 and lost and source.find(chunk, at + 1) >= 0:
            at = -1  # not where the lost chunk ended: ambiguous
        if at < 0:
            spans.append(None)
            lost = True
            continue
        spans.append((at, at + len(chunk)))
        cursor = at + len(chunk)
        lost = False
    return spans


def captions(source: str, timings: Sequence[tuple[int, int, str]]) -> list[Cue]:
    """Cues of a plain text from each chunk's ``(start, end, text as spoken)`` in the joined audio, in chunk order."""
    return segment_captions([source], [(start, end, spoken, 0) for start, end, spoken, *_ in timings], plain=True)


def segment_captions(
    sources: Sequence[str],
    timings: Sequence[tuple[int, int, str, int]],
    speakers: Sequence[str | None] = (),
    marks: Sequence[tuple[str, int]] = (),
    *,
    plain: bool = False,
) -> list[Cue]:
    """Cues from each chunk's ``(start, end, text as spoken, segment)`` in the joined audio, in the job's order:
    offsets in each segment's text (``sources``), each cue with its segment and its segment's speaker
    (``speakers``, by segment), and ``marks`` — ``(name, sample)`` — on the cue they fall in, or else the last one
    before them (the first cue, for marks before any speech). ``plain``: a text of its own, not segments (its cues
    name no segment)."""
    spans: list[tuple[int, int] | None] = [None] * len(timings)
    by_segment: dict[int, list[int]] = {}
    for number, timing in enumerate(timings):
        by_segment.setdefault(timing[3], []).append(number)
    for segment, mine in by_segment.items():
        for number, span in zip(mine, source_spans(sources[segment], [timings[number][2] for number in mine]), strict=True):
            spans[number] = span
    starts = [timing[0] for timing in timings]  # in order: the joined audio's
    placed: dict[int, list[CueMark]] = {}
    for name, sample in marks:
        at = max(bisect.bisect_right(starts, sample) - 1, 0)
        placed.setdefault(at, []).append(CueMark(name=name, sample=sample))
    return [
        Cue(
            index=index,
            start=start,
            end=end,
            text=spoken_text(spoken),
            source_start=span[0] if span else None,
            source_end=span[1] if span else None,
            segment=None if plain else segment,
            speaker=speakers[segment] if segment < len(speakers) else None,
            marks=placed.get(index),
        )
        for index, ((start, end, spoken, segment), span) in enumerate(zip(timings, spans, strict=True))
    ]


def _timestamp(samples: int, sample_rate: int, separator: str) -> str:
    """``HH:MM:SS,mmm`` (SRT) or ``HH:MM:SS.mmm`` (WebVTT), rounded to the millisecond."""
    ms = round(samples * 1000 / sample_rate)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{ms:03d}"


def _one_line(text: str) -> str:
    """A cue's text without blank lines, which end a cue in both formats (and "-->", which WebVTT forbids)."""
    return " ".join(text.split()).replace("-->", "->")


def _block(label: object, cue: Cue, text: str, sample_rate: int, separator: str) -> str:
    """One cue: its label, ``start --> end``, its text on one line."""
    times = f"{_timestamp(cue.start, sample_rate, separator)} --> {_timestamp(cue.end, sample_rate, separator)}"
    return f"{label}\n{times}\n{text}\n"


def _srt_text(cue: Cue) -> str:
    """SubRip has no speaker syntax: a speaker is written before the words, as ``Speaker: words``."""
    text = _one_line(cue.text)
    return f"{_one_line(cue.speaker)}: {text}" if cue.speaker else text


def _escape_vtt(text: str) -> str:
    """WebVTT cue text: ``&`` and ``<`` start entities and tags, ``>`` ends a voice's annotation."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _vtt_text(cue: Cue) -> str:
    """WebVTT's voice span for a cue with a speaker: ``<v Speaker>words``."""
    text = _one_line(cue.text)
    return f"<v {_escape_vtt(_one_line(cue.speaker))}>{_escape_vtt(text)}" if cue.speaker else text


def srt(cues: Sequence[Cue], sample_rate: int) -> str:
    """SubRip: cues numbered from 1, a comma before the milliseconds, a blank line between cues."""
    return "\n".join(_block(number, cue, _srt_text(cue), sample_rate, ",") for number, cue in enumerate(cues, start=1))


def vtt(cues: Sequence[Cue], sample_rate: int) -> str:
    """WebVTT: the ``WEBVTT`` header, then one cue per chunk (identified by its index), a dot before the milliseconds."""
    return "WEBVTT\n\n" + "\n".join(_block(cue.index, cue, _vtt_text(cue), sample_rate, ".") for cue in cues)
