"""One job's audio, put together from chunks that may end in any order, and from pieces of chunks still running; and a
refine job's text, put together from its chunks alike (:class:`RefinedChunks`).

With continuous batching a request's sentence chunks decode side by side and end when each is
done, not in order. A job's audio is still its chunks joined in order (:class:`ChunkJoiner`), and
its stream still carries them in order: a finished chunk waits here until every earlier one has
ended, and then it and every waiting successor are released at once.

A job is spoken as parts (:mod:`ttsq.domain.segments`: a plain job is one part; a dialogue, one or more per line),
each its own engine request with chunks numbered from 0. The order is the parts' order, then each part's chunks; a
part's layout (:class:`PartLayout`) sets the silence before its first chunk (an exact pause, or the usual gap after
earlier speech), the gain on its samples, and whether it is silence alone (no request: its pause is joined after
the speech before it, or before the first speech).

A chunk decoded in pieces as it is generated (:class:`~ttsq.inference.base.PieceReady`) is released as
its pieces come, once it is the first chunk not yet ended: as much of it as the join can no longer change (the
joiner's fade-out needs the chunk's end, :meth:`ChunkJoiner.settled`), then the rest when it ends. The releases of
a job, concatenated, are exactly its joined audio (:meth:`JobAudio.samples`): what is streamed is what is stored.
"""

from __future__ import annotations

import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import ChunkJoiner
from ttsq.domain.captions import Cue, segment_captions
from ttsq.domain.jobs import TTSParams
from ttsq.domain.refine import REFINED_CONTENT_TYPE, refined_result, refined_text
from ttsq.domain.segments import Part, gain_factor
from ttsq.inference.base import ChunkAudio
from ttsq.store.cache import CachedAudio

__all__ = ["ChunkTiming", "JobAudio", "PartLayout", "RefinedChunks", "Release", "marks_of", "part_key", "parts_of_key"]


@dataclass(frozen=True)
class PartLayout:
    """How one part of a job is joined: the silence before it, the gain on it, and whether it is silence alone."""

    pause: int | None = None
    """Exactly this many zero samples before its first chunk; None: the usual gap after earlier speech."""
    gain: float = 1.0
    """Linear factor on its samples (as streamed and as stored)."""
    silent: bool = False
    """It has nothing to speak and no engine request: its pause alone."""


ONE_PART = (PartLayout(),)
"""A plain job's layout: one part, the usual gaps."""


class ChunkTiming(NamedTuple):
    """Where one joined chunk's speech lies in the job's audio (samples, ``end`` exclusive), what it said, and the
    part it belongs to: its caption."""

    start: int
    end: int
    text: str
    part: int = 0


@dataclass(frozen=True)
class Release:
    """Samples of the joined audio that are final: the next ones for the job's stream."""

    index: int
    """The chunk they belong to, counted over the whole job."""
    total: int
    """The job's chunks as far as they are known (a part not begun yet counts as one, so it only grows)."""
    samples: npt.NDArray[np.float32]
    at: int
    """Where they start in the joined audio (samples): a reader of a re-run attempt skips what it has heard by it."""
    final: bool
    """The chunk's last release: its caption (:attr:`JobAudio.timings`) is known."""
    part: int = 0
    """The part its chunk belongs to."""
    parts_done: int = 0
    """The job's parts wholly released once it is (a document's next attempt goes on from there)."""


@dataclass
class JobAudio:
    """The chunks of one job that have ended, joined in order as far as they reach, and the pieces of the next."""

    parts: Sequence[PartLayout] = ONE_PART
    joiner: ChunkJoiner = field(default_factory=ChunkJoiner)
    first_audio_at: float | None = None
    """``time.perf_counter()`` when the job's first audio was released (a piece of, or the whole, first chunk)."""
    timings: list[ChunkTiming] = field(default_factory=list)
    """Each joined chunk's place, text and part, in the job's order (:attr:`Release.index`)."""
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Each finished part's (start, end) in the joined audio: from its first chunk's speech to its last's (a silent
    part: its silence). Where its marks are."""
    pieced: bool = False
    """Some of its audio was released before its chunk ended."""
    keep: bool = True
    """Keep the joined audio for :meth:`samples` (a document keeps none: its audio is its stream's)."""
    _totals: dict[int, int] = field(default_factory=dict)
    """Chunks of each part, as its first event said (0 for a silent part)."""
    _known: int = 0
    """The chunks of the parts in :attr:`_totals`, together."""
    _pending: dict[tuple[int, int], ChunkAudio] = field(default_factory=dict)
    _partial: dict[tuple[int, int], npt.NDArray[np.float32]] = field(default_factory=dict)
    """Each running chunk's pieces so far, joined (gain applied)."""
    _pieces: list[npt.NDArray[np.float32]] = field(default_factory=list)
    _part: int = 0
    _chunk: int = 0
    """The next chunk to join: chunk :attr:`_chunk` of part :attr:`_part`."""
    _joined: int = 0
    """Chunks joined so far: the job-wide index of the next."""
    _start: int = 0
    """Where the next chunk's piece starts in the joined audio."""
    _sent: int = 0
    """Samples of the next chunk (its pause included) released before it ended."""
    _lead: int = 0
    """Silence of silent parts before the first speech, put before the first chunk's own pause."""
    _paused: bool = False
    """An explicit silence (a silent part's pause) was joined after the last speech: it stands in place of the usual
    gap before the next chunk."""

    @classmethod
    def of(cls, parts: Sequence[Part], *, keep: bool = True) -> JobAudio:
        """The audio of a job spoken as ``parts`` (:meth:`ttsq.domain.jobs.TTSParams.parts`)."""
        return cls([PartLayout(part.pause, gain_factor(part.source.gain_db), part.silent) for part in parts], keep=keep)

    def resume(self, parts_done: int, index: int, at: int, timings: Sequence[tuple[int, int, str, int]]) -> None:
        """Go on after an earlier attempt that released the first ``parts_done`` parts whole: ``index`` chunks, up to
        sample ``at``, with those chunks' ``timings`` (a document's stream has them: :mod:`ttsq.runtime.documents`).
        The next chunk is the first of part ``parts_done``, after the usual gap (speech came before it)."""
        if not 0 < parts_done <= len(self.parts) or self._joined or self._partial or self._pending:
            raise ValueError(f"cannot resume a job of {len(self.parts)} parts after {parts_done} of them")
        for number in range(parts_done):
            self._totals.setdefault(number, 0)
        self._known = index
        self._part, self._chunk, self._joined, self._start = parts_done, 0, index, at
        self._lead, self._paused = 0, False
        self.joiner.resume()
        self.timings.extend(ChunkTiming(*timing) for timing in timings)
        for start, end, _text, part in timings:  # where each published part's speech lies (its marks' places)
            first, _ = self.spans.get(part, (start, end))
            self.spans[part] = (first, end)

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a job's audio has at least one part")
        self._totals = {number: 0 for number, layout in enumerate(self.parts) if layout.silent}
        self._known = 0
        self._lead = self._pass_silence(0)

    @property
    def total(self) -> int | None:
        """The job's chunks, once every part has said how many it has (None before)."""
        if len(self._totals) < len(self.parts):
            return None
        return sum(self._totals.values())

    def add_piece(self, piece: ChunkAudio, part: int = 0) -> list[Release]:
        """Take the next samples of a chunk of ``part`` that has not ended; what is released (maybe nothing)."""
        piece = self._checked(piece, part)
        key = (part, piece.index)
        if key < (self._part, self._chunk) or key in self._pending:
            raise ValueError(f"a piece of chunk {piece.index} of part {part} arrived after the chunk ended")
        before = self._partial.get(key)
        self._partial[key] = piece.samples if before is None else np.concatenate([before, piece.samples])
        return self._settled() if key == (self._part, self._chunk) else []

    def add(self, chunk: ChunkAudio, part: int = 0) -> list[Release]:
        """Take one ended chunk of ``part`` (the whole of it: its pieces, then the rest); what it releases, in order."""
        chunk = self._checked(chunk, part)
        key = (part, chunk.index)
        if key in self._pending or key < (self._part, self._chunk):
            raise ValueError(f"chunk {chunk.index} of part {part} arrived twice")
        partial = self._partial.get(key)
        if partial is not None and not np.array_equal(chunk.samples[: partial.size], partial):
            raise ValueError(f"chunk {chunk.index} of part {part} does not begin with its pieces")
        self._pending[key] = chunk
        released = []
        while (self._part, self._chunk) in self._pending:
            released.append(self._join(self._pending.pop((self._part, self._chunk))))
        return released + self._settled()

    def _join(self, ended: ChunkAudio) -> Release:
        """Join the next chunk (it has ended), and after it the silence of any silent parts that follow its part."""
        number = self._part
        self._partial.pop((number, ended.index), None)
        piece = self.joiner.add(ended.samples, self._pause())
        self._lead, self._paused = 0, False
        # A piece is the pause before the chunk, then the chunk: its speech ends where the piece ends.
        end = self._start + piece.size
        timing = ChunkTiming(end - ended.samples.size, end, ended.text, number)
        self.timings.append(timing)
        first, last = ended.index == 0, ended.index == self._totals[number] - 1
        if first:
            self.spans[number] = (timing.start, timing.end)
        if last:
            self.spans[number] = (self.spans[number][0], timing.end)
            self._part, self._chunk = number + 1, 0
            silence = self._pass_silence(end)
            if silence:
                piece = np.concatenate([piece, np.zeros(silence, dtype=np.float32)])
        else:
            self._chunk += 1
        if self.keep:
            self._pieces.append(piece)
        release = self._release(piece[self._sent :], final=True, part=number)
        self._joined += 1
        self._start, self._sent = self._start + piece.size, 0
        return release

    def _pass_silence(self, at: int) -> int:
        """Move past the silent parts from the current one, each spanning its pause from ``at`` on; their silence."""
        silence = 0
        while self._part < len(self.parts) and self.parts[self._part].silent:
            length = self.parts[self._part].pause or 0
            self._paused = self._paused or self.parts[self._part].pause is not None
            self.spans[self._part] = (at + silence, at + silence + length)
            silence += length
            self._part += 1
        return silence

    def _pause(self) -> int | None:
        """The silence before the next chunk: the first chunk of a part with a pause of its own gets exactly that, and
        the job's first chunk also the silence of the silent parts before it; a chunk right after a silent part's
        pause, no more (that pause was its gap); any other, the joiner's usual gap."""
        own = self.parts[self._part].pause if self._chunk == 0 else None
        if own is None and self._paused:
            own = 0
        return own if not self._lead else self._lead + (own or 0)  # nothing was spoken before: no usual gap

    def _checked(self, chunk: ChunkAudio, part: int) -> ChunkAudio:
        """``chunk`` with its part's gain; its part's chunk count recorded (and checked against earlier ones)."""
        if not 0 <= part < len(self.parts) or self.parts[part].silent:
            raise ValueError(f"part {part} of this job has no chunks")
        known = self._totals.get(part)
        if known is None:
            known = self._totals[part] = chunk.total
            self._known += chunk.total
        if chunk.total != known:
            raise ValueError(f"chunk {chunk.index} of part {part} says {chunk.total} chunks, earlier ones said {known}")
        gain = self.parts[part].gain
        return chunk if gain == 1.0 else replace(chunk, samples=(chunk.samples * np.float32(gain)).astype(np.float32))

    def _settled(self) -> list[Release]:
        """The part of the next chunk's pieces that its end cannot change, not released yet."""
        if self.complete:
            return []
        partial = self._partial.get((self._part, self._chunk))
        if partial is None:
            return []
        settled = self.joiner.settled(partial, self._pause())
        if settled.size <= self._sent:
            return []
        self.pieced = True
        release = self._release(settled[self._sent :], final=False, part=self._part)
        self._sent = settled.size
        return [release]

    def _release(self, samples: npt.NDArray[np.float32], *, final: bool, part: int) -> Release:
        if self.first_audio_at is None:
            self.first_audio_at = time.perf_counter()
        at = self._start + self._sent
        return Release(self._joined, self._known_total(), samples, at=at, final=final, part=part, parts_done=self._part)

    def _known_total(self) -> int:
        """Chunks known, and one for each part not begun (kept as a sum, not counted again: a document has thousands)."""
        return self._known + len(self.parts) - len(self._totals)

    @property
    def complete(self) -> bool:
        return self._part >= len(self.parts)

    @property
    def length(self) -> int:
        """Samples of the joined audio released whole so far (all of it once :attr:`complete`)."""
        return self._start

    def captions(self, params: TTSParams) -> list[Cue]:
        """The finished job's cues: each chunk's, with its segment and speaker (a job of segments), and the marks'
        places (:func:`ttsq.domain.captions.segment_captions`)."""
        parts = params.parts()
        timings = [(start, end, text, parts[part].segment) for start, end, text, part in self.timings]
        if params.segments is None:
            return segment_captions([params.text], timings, plain=True)
        sources = [segment.text for segment in params.segments]
        speakers = [segment.speaker for segment in params.segments]
        return segment_captions(sources, timings, speakers, marks_of(parts, self.spans))

    def samples(self) -> npt.NDArray[np.float32]:
        """The whole joined audio (all chunks must have ended)."""
        if not self.complete:
            raise ValueError("the job's audio is not complete")
        return np.concatenate(self._pieces) if self._pieces else np.zeros(0, dtype=np.float32)


def part_key(job_id: str, part: int) -> str:
    """The engine's key for one part's request: the job's id for its first part (a plain job's one request is keyed
    by its id, as the liveness record and the logs name it), ``<id>#<part>`` for the others."""
    return job_id if part == 0 else f"{job_id}#{part}"


def parts_of_key(key: str, jobs: Container[str]) -> tuple[str, int]:
    """The job and part an engine key names (:func:`part_key`); ``jobs`` are the ids in hand (an id is its own key)."""
    if key in jobs:
        return key, 0
    job_id, sign, number = key.rpartition("#")
    return (job_id, int(number)) if sign and number.isdigit() else (key, 0)


def marks_of(parts: Sequence[Part], spans: Mapping[int, tuple[int, int]]) -> list[tuple[str, int]]:
    """Every mark of a job's segments with its exact sample in the joined audio, in order: a mark before a part's text
    stands where its speech begins (a silent part's: where its silence ends), one at its segment's end where the
    speech ends (:mod:`ttsq.domain.segments`)."""
    found: list[tuple[str, int]] = []
    for part in parts:
        start, end = spans[part.number]
        found += [(name, end if part.silent else start) for name in part.marks_at_start]
        found += [(name, end) for name in part.marks_at_end]
    return found


@dataclass
class RefinedChunks:
    """A refine job's chunks (each one's refined text, no samples: ``SynthesisRequest.refine_only``), ending in any
    order; its result once every one has, joined in order (:func:`ttsq.domain.refine.refined_text`)."""

    total: int | None = None
    _texts: dict[int, str] = field(default_factory=dict)

    def add(self, chunk: ChunkAudio) -> None:
        if chunk.index in self._texts:
            raise ValueError(f"chunk {chunk.index} arrived twice")
        if self.total is not None and chunk.total != self.total:
            raise ValueError(f"chunk {chunk.index} says {chunk.total} chunks, earlier ones said {self.total}")
        self.total = chunk.total
        self._texts[chunk.index] = chunk.text

    @property
    def complete(self) -> bool:
        return self.total is not None and len(self._texts) == self.total

    def result(self) -> CachedAudio:
        """The job's result, stored as a synthesised job's is (and cached alike): the refined text
        (:func:`ttsq.domain.refine.refined_result`)."""
        if not self.complete or self.total is None:
            raise ValueError("the refine job's text is not complete")
        text = refined_text([self._texts[index] for index in range(self.total)])
        return CachedAudio(refined_result(text), REFINED_CONTENT_TYPE, 0.0)
