"""A whole document on a worker: its parts fed to the engine a few at a time, and a next attempt that goes on where
the last one's stream stops.

A document (``"document": true`` on a submit, :mod:`ttsq.domain.documents`) is a job of many parts, each one engine
request. Putting them all into the engine at once would prepare (normalise) every part's text up front, hold every
finished part's audio until the parts before it end, and lose all of it with the worker. So a worker keeps at most
``DOCUMENT_PARTS_IN_FLIGHT`` of a document's parts in its engine (:class:`DocumentFeed`): the next enters as one
ends, each is prepared on its own, and the worker keeps none of the joined audio (``JobAudio(keep=False)``): each
piece goes to the job's audio stream as it is released, and the stream is the document's audio.

The stream is also what survives the worker. Its pieces are the joined audio in order, each saying how many parts
are wholly published once it is (``parts_done``), so a next attempt (the sweep gave the job to another worker) reads
it (:meth:`ttsq.store.streams.AudioStreams.resume_point`), leaves those parts out, and goes on from the first part
not wholly published, at that sample offset, with the same chunk numbering: a listener's stream continues without a
seam, and a worker's death costs only the parts it had in hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ttsq.domain.audio import CONTENT_TYPES, SAMPLE_RATE
from ttsq.domain.jobs import Job, TTSParams
from ttsq.domain.segments import Part
from ttsq.inference.base import TransientError
from ttsq.runtime.assembly import JobAudio
from ttsq.runtime.outcomes import Failure, Outcome, Synthesised
from ttsq.store.cache import CachedAudio
from ttsq.store.streams import AudioStreams

__all__ = ["DocumentFeed", "document_outcome", "resume"]

log = logging.getLogger(__name__)


@dataclass
class DocumentFeed:
    """Which of a document's parts are in the engine, and which go in next."""

    job_id: str
    parts: Sequence[Part]
    """The document's parts with something to speak, in order."""
    limit: int
    """Parts in the engine at once (``DOCUMENT_PARTS_IN_FLIGHT``)."""
    _next: int = 0
    """Index in :attr:`parts` of the next to go in."""
    _ended: dict[int, int] = field(default_factory=dict)
    """Chunks ended so far of each part in the engine, by part number."""

    def start(self, first: int) -> list[Part]:
        """The parts to put in now, from part number ``first`` on (the ones before were published whole)."""
        self._next = next((at for at, part in enumerate(self.parts) if part.number >= first), len(self.parts))
        return self._fill()

    def ended(self, part: int, total: int) -> list[Part]:
        """One chunk of ``part`` (of ``total`` chunks) ended; the parts to put in now (the next, once ``part`` ended)."""
        done = self._ended.get(part, 0) + 1
        if done < total:
            self._ended[part] = done
            return []
        self._ended.pop(part, None)
        log.info("%s part %d of %d synthesised (%d chunks)", self.job_id, part + 1, len(self.parts), total)
        return self._fill()

    @property
    def in_engine(self) -> int:
        """Parts in the engine now."""
        return len(self._ended)

    def _fill(self) -> list[Part]:
        added = []
        while len(self._ended) < self.limit and self._next < len(self.parts):
            part = self.parts[self._next]
            self._ended[part.number] = 0
            added.append(part)
            self._next += 1
        return added


async def resume(streams: AudioStreams, job: Job, audio: JobAudio, parts: int) -> int:
    """Set ``audio`` to go on after what the document's stream holds whole (an earlier attempt's parts); the first
    part number to speak. Redis errors are the caller's."""
    point = await streams.resume_point(job.id)
    if point.parts_done <= 0:
        return 0
    audio.resume(point.parts_done, point.index, point.at, point.captions())
    log.info(
        "%s goes on after %d of its %d parts (%.1f s of audio kept in its stream)",
        job.id,
        point.parts_done,
        parts,
        point.at / SAMPLE_RATE,
    )
    return point.parts_done


def document_outcome(audio: JobAudio, params: TTSParams, claimed_at: float) -> Outcome:
    """A finished document's outcome: its audio is its stream's, so its result records only the length and the
    captions of the whole document (the ``format`` it is served in is encoded as it is read)."""
    if audio.length == 0:
        return Failure(TransientError("model produced no audio"))
    kept = CachedAudio(b"", CONTENT_TYPES[params.format], audio.length / SAMPLE_RATE, captions=audio.captions(params))
    return Synthesised(kept, busy_s=time.perf_counter() - claimed_at)
