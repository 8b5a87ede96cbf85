"""One job's audio, put together from chunks that may end in any order, and from pieces of chunks still running; and a
refine job's text, put together from its chunks alike (:class:`RefinedChunks`).

With continuous batching a request's sentence chunks decode side by side and end when each is
done, not in order. A job's audio is still its chunks joined in order (:class:`ChunkJoiner`), and
its stream still carries them in order: a finished chunk waits here until every earlier one has
ended, and then it and every waiting successor are released at once.

A chunk decoded in pieces as it is generated (:class:`~ttsq.inference.base.PieceReady`) is released as
its pieces come, once it is the first chunk not yet ended: as much of it as the join can no longer change (the
joiner's fade-out needs the chunk's end, :meth:`ChunkJoiner.settled`), then the rest when it ends. The releases of
a job, concatenated, are exactly its joined audio (:meth:`JobAudio.samples`): what is streamed is what is stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import ChunkJoiner
from ttsq.domain.refine import REFINED_CONTENT_TYPE, refined_result, refined_text
from ttsq.inference.base import ChunkAudio
from ttsq.store.cache import CachedAudio

__all__ = ["JobAudio", "RefinedChunks", "Release"]


@dataclass(frozen=True)
class Release:
    """Samples of the joined audio that are final: the next ones for the job's stream."""

    index: int
    """The chunk they belong to."""
    total: int
    samples: npt.NDArray[np.float32]
    at: int
    """Where they start in the joined audio (samples): a reader of a re-run attempt skips what it has heard by it."""
    final: bool
    """The chunk's last release: its caption (:attr:`JobAudio.timings`) is known."""


@dataclass
class JobAudio:
    """The chunks of one job that have ended, joined in order as far as they reach, and the pieces of the next."""

    joiner: ChunkJoiner = field(default_factory=ChunkJoiner)
    total: int | None = None
    first_audio_at: float | None = None
    """``time.perf_counter()`` when the job's first audio was released (a piece of, or the whole, first chunk)."""
    timings: list[tuple[int, int, str]] = field(default_factory=list)
    """Each joined chunk's (start, end) in the joined audio, in samples, and its text as spoken: its caption."""
    pieced: bool = False
    """Some of its audio was released before its chunk ended."""
    _pending: dict[int, ChunkAudio] = field(default_factory=dict)
    _partial: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)
    """Each running chunk's pieces so far, joined."""
    _pieces: list[npt.NDArray[np.float32]] = field(default_factory=list)
    _next: int = 0
    _start: int = 0
    """Where chunk :attr:`_next` starts in the joined audio."""
    _sent: int = 0
    """Samples of chunk :attr:`_next` (its pause included) released before it ended."""

    def add_piece(self, piece: ChunkAudio) -> list[Release]:
        """Take the next samples of a chunk that has not ended; what is released (maybe nothing)."""
        self._check_total(piece)
        if piece.index < self._next or piece.index in self._pending:
            raise ValueError(f"a piece of chunk {piece.index} arrived after the chunk ended")
        before = self._partial.get(piece.index)
        self._partial[piece.index] = piece.samples if before is None else np.concatenate([before, piece.samples])
        return self._settled() if piece.index == self._next else []

    def add(self, chunk: ChunkAudio) -> list[Release]:
        """Take one ended chunk (the whole of it: its pieces, then the rest); what it releases, in order."""
        self._check_total(chunk)
        if chunk.index in self._pending or chunk.index < self._next:
            raise ValueError(f"chunk {chunk.index} arrived twice")
        partial = self._partial.get(chunk.index)
        if partial is not None and not np.array_equal(chunk.samples[: partial.size], partial):
            raise ValueError(f"chunk {chunk.index} does not begin with its pieces")
        self._pending[chunk.index] = chunk
        released = []
        while self._next in self._pending:
            ended = self._pending.pop(self._next)
            self._partial.pop(self._next, None)
            piece = self.joiner.add(ended.samples)
            # A piece is the pause before the chunk (none before the first), then the chunk: it ends where the piece ends.
            end = self._start + piece.size
            self.timings.append((end - ended.samples.size, end, ended.text))
            self._pieces.append(piece)
            released.append(self._release(piece[self._sent :], final=True))
            self._next += 1
            self._start, self._sent = end, 0
        return released + self._settled()

    def _check_total(self, chunk: ChunkAudio) -> None:
        if self.total is None:
            self.total = chunk.total
        elif chunk.total != self.total:
            raise ValueError(f"chunk {chunk.index} says {chunk.total} chunks, earlier ones said {self.total}")

    def _settled(self) -> list[Release]:
        """The part of chunk :attr:`_next`'s pieces that its end cannot change, not released yet."""
        partial = self._partial.get(self._next)
        if partial is None:
            return []
        settled = self.joiner.settled(partial)
        if settled.size <= self._sent:
            return []
        self.pieced = True
        release = self._release(settled[self._sent :], final=False)
        self._sent = settled.size
        return [release]

    def _release(self, samples: npt.NDArray[np.float32], *, final: bool) -> Release:
        if self._next == 0 and self.first_audio_at is None:
            self.first_audio_at = time.perf_counter()
        assert self.total is not None
        return Release(self._next, self.total, samples, at=self._start + self._sent, final=final)

    @property
    def complete(self) -> bool:
        return self.total is not None and self._next == self.total

    def samples(self) -> npt.NDArray[np.float32]:
        """The whole joined audio (all chunks must have ended)."""
        if not self.complete:
            raise ValueError("the job's audio is not complete")
        return np.concatenate(self._pieces) if self._pieces else np.zeros(0, dtype=np.float32)


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
