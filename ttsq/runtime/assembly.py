"""One job's audio, put together from chunks that may end in any order.

With continuous batching a request's sentence chunks decode side by side and end when each is
done, not in order. A job's audio is still its chunks joined in order (:class:`ChunkJoiner`), and
its stream still carries them in order: a finished chunk waits here until every earlier one has
ended, and then it and every waiting successor become pieces at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import ChunkJoiner
from ttsq.inference.base import ChunkAudio

__all__ = ["JobAudio"]


@dataclass
class JobAudio:
    """The chunks of one job that have ended, joined in order as far as they reach."""

    joiner: ChunkJoiner = field(default_factory=ChunkJoiner)
    total: int | None = None
    first_audio_at: float | None = None
    """``time.perf_counter()`` when the job's first chunk (index 0) ended."""
    timings: list[tuple[int, int, str]] = field(default_factory=list)
    """Each joined chunk's (start, end) in the joined audio, in samples, and its text as spoken: its caption."""
    _pending: dict[int, ChunkAudio] = field(default_factory=dict)
    _pieces: list[npt.NDArray[np.float32]] = field(default_factory=list)
    _next: int = 0
    _length: int = 0

    def add(self, chunk: ChunkAudio) -> list[tuple[int, npt.NDArray[np.float32]]]:
        """Take one ended chunk; the pieces (index, joined samples) it releases, in order."""
        if self.total is None:
            self.total = chunk.total
        elif chunk.total != self.total:
            raise ValueError(f"chunk {chunk.index} says {chunk.total} chunks, earlier ones said {self.total}")
        if chunk.index in self._pending or chunk.index < self._next:
            raise ValueError(f"chunk {chunk.index} arrived twice")
        if chunk.index == 0:
            self.first_audio_at = time.perf_counter()
        self._pending[chunk.index] = chunk
        released = []
        while self._next in self._pending:
            ended = self._pending.pop(self._next)
            piece = self.joiner.add(ended.samples)
            # A piece is the pause before the chunk (none before the first), then the chunk: it ends where the piece ends.
            spoken = self._length + piece.size - ended.samples.size
            self._length += piece.size
            self.timings.append((spoken, self._length, ended.text))
            self._pieces.append(piece)
            released.append((self._next, piece))
            self._next += 1
        return released

    @property
    def complete(self) -> bool:
        return self.total is not None and self._next == self.total

    def samples(self) -> npt.NDArray[np.float32]:
        """The whole joined audio (all chunks must have ended)."""
        if not self.complete:
            raise ValueError("the job's audio is not complete")
        return np.concatenate(self._pieces) if self._pieces else np.zeros(0, dtype=np.float32)
