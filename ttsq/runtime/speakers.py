"""Voice resolution on the worker: which speaker a job is synthesised with, from what the API resolved at submit.

The API turns a voice name into a seed, an embedding, a speaker prompt or a blend's recipe (``TTSParams``, or each
segment of a job of segments); here each part of a job (:func:`ttsq.domain.segments.parts`) becomes the engine's
:class:`~ttsq.inference.base.SynthesisRequest`, in its segment's voice and sampling and from its own seed. Pure
functions of a job's parameters and the worker's :class:`Speakers` (the speakers it drew from seeds, over its engine),
so that they are tested without a worker. Drawing a speaker runs the model's code: :func:`part_request` runs in the
inference thread's preparation thread (:mod:`ttsq.runtime.inference_thread`), never on the loop nor between steps.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from ttsq.domain.blends import BlendPart
from ttsq.domain.jobs import TTSParams
from ttsq.domain.segments import Part, VoiceFields
from ttsq.inference.base import PermanentError, SynthesisRequest
from ttsq.inference.stream_listeners import StreamCue

SPEAKER_CACHE_SIZE = 512
"""Speakers drawn from seeds, kept per worker. Bounded: every random request brings a new seed."""


class SpeakerSource(Protocol):
    """What of an engine resolution needs (:class:`ttsq.inference.base.Engine` has both)."""

    def speaker_from_seed(self, seed: int) -> str: ...

    def blend_speakers(self, speakers: Sequence[str], weights: Sequence[float]) -> str: ...


class Speakers:
    """The speakers a worker drew from seeds, the last ``size`` kept (drawing one costs a model call), over its engine."""

    def __init__(self, engine: SpeakerSource, size: int = SPEAKER_CACHE_SIZE) -> None:
        self.engine = engine
        self.size = size
        self._drawn: OrderedDict[int, str] = OrderedDict()
        """Voices drawn from seeds (the preparation thread's own: drawing one runs the model's code)."""

    def seeded(self, seed: int) -> str:
        """The speaker drawn from ``seed`` (the last few kept: drawing costs a model call)."""
        speaker = self._drawn.get(seed)
        if speaker is None:
            speaker = self._drawn[seed] = self.engine.speaker_from_seed(seed)
            if len(self._drawn) > self.size:
                self._drawn.popitem(last=False)
        else:
            self._drawn.move_to_end(seed)
        return speaker

    def kept(self, seed: int) -> str | None:
        """The speaker drawn from ``seed`` if it is still kept; None otherwise (nothing is drawn)."""
        return self._drawn.get(seed)


def synthesis_request(params: TTSParams, speakers: Speakers) -> SynthesisRequest:
    """The engine's request for a plain job, its one part (runs in the preparation thread: drawing a voice uses the model)."""
    return part_request(params, params.parts()[0], speakers)


def part_request(params: TTSParams, part: Part, speakers: Speakers, stream: StreamCue | None = None) -> SynthesisRequest:
    """The engine's request for one part of a job (:mod:`ttsq.domain.segments`): its text, in its segment's voice,
    sampled as its segment says (else as the job does), from its own seed (runs in the preparation thread). A refine job
    needs no speaker: none is drawn for it, and its request only refines the text. Its audio comes in pieces within a
    chunk only where the job has a live listener (``params.listened``); otherwise each chunk is decoded whole.
    ``stream``: the job's place in a stream heard across jobs (:func:`ttsq.runtime.outcomes.stream_cue`)."""
    voice = part.source
    return SynthesisRequest(
        text=part.text,
        speaker=None if params.refine_only else speaker(voice, speakers),
        seed=part.seed,
        sampling=voice.sampling if voice.sampling is not None else params.sampling,
        speaker_prompt=voice.speaker_prompt,
        prompt_text=voice.prompt_text,
        consistent=voice.consistent_voice,
        first_chunk=part.first_chunk,
        refine_only=params.refine_only,
        stream=stream,
        pieces=params.listened,
    )


def speaker(params: VoiceFields, speakers: Speakers) -> str | None:
    """The speaker embedding of a job's (or a segment's) voice; the API resolved any voice name to a seed, an
    embedding or a speaker prompt at submit (a reference voice is its prompt alone: no embedding)."""
    if params.speaker_blend is not None:
        return blend(params.speaker_blend, speakers)
    if params.speaker_embedding is not None:
        return params.speaker_embedding
    if params.speaker_seed is None and params.speaker_prompt is not None:
        return None
    if params.speaker_seed is None:
        raise PermanentError("job carries no speaker seed")
    return speakers.seeded(params.speaker_seed)


def blend(parts: Sequence[BlendPart], speakers: Speakers) -> str:
    """A blend's embedding, from its components' embeddings (seeds drawn as for a seed voice) and weights."""
    drawn: list[str] = []
    for part in parts:
        if part.embedding is None and part.seed is None:
            raise PermanentError(f"blend component {part.voice!r} carries neither a seed nor an embedding")
        drawn.append(part.embedding if part.embedding is not None else speakers.seeded(part.seed or 0))
    try:
        return speakers.engine.blend_speakers(drawn, [part.weight for part in parts])
    except ValueError as exc:
        raise PermanentError(f"the blend cannot be made: {exc}") from exc


async def recorded_speaker(params: TTSParams, speakers: Speakers) -> str | None:
    """The speaker embedding a voice draw's preview was synthesised with (None for any other job): the one
    just drawn for its seed, from the speaker cache, else drawn again off the loop (the draw is reproducible)."""
    if not params.record_speaker:
        return None
    if params.speaker_embedding is not None or params.speaker_seed is None:
        return params.speaker_embedding
    cached = speakers.kept(params.speaker_seed)
    if cached is not None:
        return cached
    return await asyncio.get_running_loop().run_in_executor(None, speakers.engine.speaker_from_seed, params.speaker_seed)
