"""A job made of segments: ordered runs of text, each in a voice and with sampling of its own, and how they are cut
into what the engine speaks.

A plain job is one text in one voice. A dialogue, an SSML document or a long document is a list of
:class:`Segment`: each has its text, its voice (resolved by the API at submit, for the caller's tenant, exactly as a
request's ``voice`` is), optional sampling (the one record, :class:`~ttsq.domain.sampling.Sampling`: a segment that
names none samples as its job does), an exact pause before it (samples at 24 kHz, in place of the usual gap), an
optional gain, a speaker label for captions, and named marks at character offsets of its text.

The rules the rest of ttsq keeps (the worker, :mod:`ttsq.runtime.assembly`, :mod:`ttsq.domain.captions`):

* **Segments are chunked independently, never merged across.** A segment is cut at its marks into :class:`Part`
  (:func:`parts`), and each part is one engine request: the engine splits it into sentence chunks as it splits any
  text, so no chunk ever holds words of two segments (or of two sides of a mark).
* **A chunk's audio depends only on its own segment** — its text, voice, sampling, the job's seed and its position —
  not on any other segment. Each part draws the random streams of a seed of its own, :func:`part_seed` of the job's
  seed and the part's place (segment, part), and its chunk ``i`` draws stream ``i`` of that seed, as any request's
  chunks do. On a batch-invariant worker, changing one line's speaker leaves every other line's audio bit-equal.
  The job's first part uses the job's seed itself (and its ``first_chunk``): a job of one segment without marks
  samples exactly as the same text submitted plain.
* **Marks are exact**: the engine has no word timings, so a mark's place in the audio is known exactly only where a
  chunk begins or ends; a mark inside a segment's text therefore cuts the segment there, and its sample offset is
  where the speech after it begins (or, at the end of a segment, where its speech ends).
* **Silence is exact**: a segment's ``pause_samples`` puts exactly that many zero samples before its speech, in place
  of the usual gap (:data:`ttsq.domain.audio.SENTENCE_GAP_MS`, which separates speech from earlier speech only). A
  segment with nothing to speak (empty, or punctuation alone) is its pause alone: a break.

Pure: no I/O, nothing of the engine.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ttsq.domain.blends import BlendPart
from ttsq.domain.sampling import Sampling
from ttsq.domain.stored import StoredList

__all__ = [
    "MAX_GAIN_DB",
    "MAX_PAUSE_SAMPLES",
    "MIN_GAIN_DB",
    "NOTHING_TO_READ",
    "Mark",
    "Part",
    "Segment",
    "VoiceFields",
    "gain_factor",
    "part_seed",
    "parts",
    "speakable",
]

PAUSE_SAMPLE_RATE = 24_000
"""Pauses are counted in samples of ttsq's audio (:data:`ttsq.domain.audio.SAMPLE_RATE`, ChatTTS's rate)."""
MAX_PAUSE_SAMPLES = 60 * PAUSE_SAMPLE_RATE
"""The longest pause before one segment (a minute): a job's silence is held in memory like its speech."""
MIN_GAIN_DB, MAX_GAIN_DB = -60.0, 20.0
"""A segment's gain, in dB: from near silence to a loud boost (samples are clipped to [-1, 1] when encoded)."""
_PART_SEED_RANGE = 2**31 - 1
"""Part seeds stay in the range of a request's seed (:data:`ttsq.domain.jobs.MAX_SEED`)."""


class VoiceFields(BaseModel):
    """A voice as the API resolved it at submit, for the worker: who speaks, never a name to look up again.

    The job record carries these flat (its voice), and so does each :class:`Segment` (its own voice), so the
    worker's speaker resolution (:func:`ttsq.runtime.speakers.speaker`) and the cache key's speaker identity
    (:func:`ttsq.domain.cache_key.speaker_identity`) read either the same way.
    """

    voice: str | None = None
    voice_owner: str | None = Field(
        default=None,
        description="The tenant whose own voice this is (``tenant:NAME``/``key:ID``); None: a global voice, or none. "
        "Part of the cache key (:func:`ttsq.domain.cache_key.cache_key`).",
    )
    speaker_seed: int | None = Field(default=None, description="Seed that draws the speaker (seed and built-in voices).")
    speaker_embedding: str | None = Field(default=None, description="ChatTTS speaker embedding (embedding voices).")
    speaker_prompt: str | None = Field(
        default=None, description="ChatTTS speaker prompt, ``spk_smp`` (reference voices: a recording's DVAE codes)."
    )
    prompt_text: str | None = Field(default=None, description="What the speaker prompt says, ``txt_smp`` (reference voices).")
    consistent_voice: bool = Field(
        default=False, description="The first chunk's audio conditions the later chunks (one voice across the text)."
    )
    speaker_blend: StoredList[BlendPart] | None = Field(
        default=None, description="The components of a blended speaker, drawn and blended by the worker (blends)."
    )


class Mark(BaseModel):
    """A named point in a segment's text: the result's captions report its exact sample offset in the audio."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1, max_length=200)
    offset: int = Field(ge=0, description="Characters into the segment's text (as stored) before which it stands.")


class Segment(VoiceFields):
    """One run of a job's text in one voice: see the module docstring for what the worker makes of it."""

    text: str = Field(description="What it says (cleaned as any request's text is); empty for a pause alone.")
    sampling: Sampling | None = Field(
        default=None, description="How it is sampled, the job's own sampling overridden where the request said; None: the job's."
    )
    pause_samples: int | None = Field(
        default=None,
        ge=0,
        le=MAX_PAUSE_SAMPLES,
        description="Exactly this many zero samples (24 kHz) before its speech, in place of the usual gap; None: the "
        "usual gap after earlier speech, nothing at the start of the audio.",
    )
    gain_db: float | None = Field(default=None, ge=MIN_GAIN_DB, le=MAX_GAIN_DB, description="Gain on its samples, in dB.")
    speaker: str | None = Field(default=None, max_length=200, description="Who speaks it, for its captions (WebVTT `<v>`).")
    marks: StoredList[Mark] | None = None

    @field_validator("gain_db")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("gain_db must be a finite number")
        return value

    @model_validator(mode="after")
    def _marks_within(self) -> Segment:
        for mark in self.marks or ():
            if mark.offset > len(self.text):
                raise ValueError(f"mark {mark.name!r} is at offset {mark.offset}, past the end of its text ({len(self.text)})")
        return self


NOTHING_TO_READ = "text has nothing to read aloud: it holds no letter, digit or ideograph"
"""Why a text that is not :func:`speakable` is refused where it would be a whole job."""


def speakable(text: str) -> bool:
    """Whether ``text`` has anything to say (a letter, digit or ideograph): a part without is silence, never an
    engine request (the engine refuses a text that is empty once normalised)."""
    return any(char.isalnum() for char in text)


def gain_factor(gain_db: float | None) -> float:
    """The linear factor of a gain in dB (1.0 for none)."""
    return 1.0 if not gain_db else float(10 ** (gain_db / 20))


def part_seed(seed: int, segment: int, part: int) -> int:
    """The seed of a part's random streams: the job's own seed for its first part (so a one-segment job samples as
    the same text submitted plain), and a stable hash of (seed, segment, part) for the others, so that a part's audio
    depends on its place alone and no two parts share noise."""
    if segment == 0 and part == 0:
        return seed
    digest = hashlib.blake2b(f"ttsq-part:{seed}:{segment}:{part}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _PART_SEED_RANGE + 1


@dataclass(frozen=True)
class Part:
    """What one engine request speaks: a segment's text between two of its marks (all of it, without marks)."""

    number: int
    """Its place among the job's parts (the worker's key for its request, the joined audio's order)."""
    segment: int
    """The segment it is cut from (index in the job's segments)."""
    index: int
    """Its place among its segment's parts."""
    source: Segment
    """The segment: its voice, sampling, gain and speaker."""
    start: int
    end: int
    """Where its text lies in the segment's text (characters)."""
    pause: int | None
    """Samples of silence before it: the segment's pause on its first part, no gap of its own on the later ones (a
    mark cuts speech where a chunk boundary would; the usual gap separates it, as it separates sentence chunks)."""
    seed: int
    first_chunk: int
    """Its chunk ``i`` draws stream ``first_chunk + i`` of :attr:`seed` (the job's ``first_chunk`` for its first
    part, 0 for the others)."""
    marks_at_start: tuple[str, ...] = ()
    """Marks standing before its text: at the start of its speech (of its silence's end, for a silent part)."""
    marks_at_end: tuple[str, ...] = ()
    """Marks at the very end of its segment's text: at the end of its speech."""

    @property
    def text(self) -> str:
        return self.source.text[self.start : self.end]

    @property
    def silent(self) -> bool:
        """Nothing to speak: it is its pause alone, and no engine request."""
        return not speakable(self.text)


def parts(segments: Sequence[Segment], seed: int, first_chunk: int = 0) -> list[Part]:
    """The job's parts in order: each segment cut at the offsets of its marks that lie inside its text (a mark at its
    start or end cuts nothing)."""
    found: list[Part] = []
    for number, segment in enumerate(segments):
        length = len(segment.text)
        marks = sorted(segment.marks or (), key=lambda mark: mark.offset)
        cuts = sorted({mark.offset for mark in marks if 0 < mark.offset < length})
        bounds = [0, *cuts, length]
        for index, (start, end) in enumerate(itertools.pairwise(bounds)):
            last = index == len(bounds) - 2
            at_start = [mark.name for mark in marks if mark.offset == start and (start < length or not length)]
            found.append(
                Part(
                    number=len(found),
                    segment=number,
                    index=index,
                    source=segment,
                    start=start,
                    end=end,
                    pause=segment.pause_samples if index == 0 else None,
                    seed=part_seed(seed, number, index),
                    first_chunk=first_chunk if number == 0 and index == 0 else 0,
                    marks_at_start=tuple(at_start),
                    marks_at_end=tuple(mark.name for mark in marks if last and length and mark.offset == length),
                )
            )
    return found
