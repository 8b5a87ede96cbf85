"""SSML submits: ``{"ssml": "<speak>…</speak>"}`` on ``POST /v1/tts/submit`` made a job of segments.

The document is read by :func:`ttsq.domain.ssml.read_ssml` (safely, against the conformance data) into spans; here
each span becomes one of the job's segments (:mod:`ttsq.domain.segments`), so a break is exact silence, a rate is
ChatTTS's speed, a volume a gain, a mark a point the result's timing reports to the sample — and the job is then
submitted like any text (:meth:`TaskService.submit`): the cache, single-flight, the queue, the caller's token,
webhooks, captions and streaming serve it unchanged. What is SSML's own:

* every ``<voice name>`` is resolved among the voices the caller sees, as a request's ``voice`` is (an unknown one is
  refused with its line and column); a span outside any ``<voice>`` speaks in the request's voice (or the seed's);
* each span's text is rewritten by the caller's pronunciation dictionary and checked as a submit's text is, and the
  document's text as a whole is held to ``MAX_TEXT_CHARS`` (digits read aloud counting as several characters),
  markup aside (the markup to ``MAX_SSML_CHARS``);
* a span's marks stay at its text's start or end through that rewriting (:meth:`ttsq.domain.ssml.Span.retexted`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ttsq.api.auth import Principal
from ttsq.api.schemas import SSML_FIELD, SubmitRequest
from ttsq.api.service.common import InvalidInput, ServiceConfig
from ttsq.api.service.dictionary import DictionaryService
from ttsq.api.service.voices import VoiceService
from ttsq.domain.cache_key import cache_key
from ttsq.domain.jobs import TTSParams
from ttsq.domain.sampling import Sampling
from ttsq.domain.segments import Mark, Segment, VoiceFields
from ttsq.domain.ssml import Span, SsmlDocument, SsmlError, SsmlLimits, read_ssml
from ttsq.domain.text import TextError, validate_text
from ttsq.domain.voices import Voice
from ttsq.store.rate_limit import RateDecision

__all__ = ["OFF_LOOP_SSML_CHARS", "ReadSsml", "SsmlService"]

OFF_LOOP_SSML_CHARS = 10_000
"""A document longer than this is read in a thread, off the event loop: ``MAX_SSML_CHARS``'s default, so only where an
operator raised it (reading is linear, tens of microseconds an element: a document at the widest limits, 100,000
elements, is over a second of CPU)."""


@dataclass(frozen=True)
class ReadSsml:
    """A submit's document, read and checked: its spans with their texts as the job will say them, the voices they
    name (resolved), and the submit's token when the dictionary took it."""

    body: SubmitRequest
    """The request with ``text`` the document's whole text (what a status shows, and what its length is checked on)."""
    spans: tuple[Span, ...]
    voices: dict[str, Voice]
    paid: RateDecision | None

    def with_segments(self, params: TTSParams, model_identity: str, scope: str | None) -> TTSParams:
        """``params`` (built from :attr:`body` as any text's are: the voice, the seed, the sampling) speaking the
        document's spans as its segments, its cache key made over them."""
        own = VoiceFields.model_construct(**{name: getattr(params, name) for name in VoiceFields.model_fields})
        sampling = params.sampling
        params.segments = [self._segment(span, own, sampling, params.consistent_voice) for span in self.spans]
        params.cache_key = cache_key(params, model_identity, scope)
        return params

    def _segment(self, span: Span, own: VoiceFields, sampling: Sampling, consistent: bool) -> Segment:
        voice = self.voices.get(span.voice) if span.voice is not None else None
        if voice is None:
            fields = dict(own)
        else:
            fields = {
                "voice": voice.name,
                "voice_owner": voice.owner,
                "speaker_seed": voice.seed,
                "speaker_embedding": voice.embedding,
                "speaker_prompt": voice.prompt,
                "prompt_text": voice.transcript,
                "speaker_blend": voice.components,
                "consistent_voice": consistent and voice.prompt is None,
            }
        return Segment.model_construct(
            text=span.text,
            sampling=None if span.speed is None else sampling.model_copy(update={"speed": span.speed}),
            pause_samples=span.pause_samples,
            gain_db=span.gain_db,
            speaker=span.voice,
            marks=[Mark.model_construct(name=mark.name, offset=mark.offset) for mark in span.marks] or None,
            **fields,
        )


class SsmlService:
    """Read a submit's SSML into what its job will say (the submit itself is :class:`TaskService`'s)."""

    def __init__(self, voicing: VoiceService, dictionary: DictionaryService, config: ServiceConfig) -> None:
        self.voicing = voicing
        self.dictionary = dictionary
        self.limits = SsmlLimits(config.max_ssml_chars, config.max_ssml_depth, config.max_ssml_elements)
        self.max_text_chars = config.max_text_chars

    async def read(self, body: SubmitRequest, caller: Principal) -> ReadSsml:
        """``body.ssml`` read, its voices resolved for ``caller``, its texts rewritten and checked; a 422 naming
        ``ssml`` (with a line and column where there is one) for anything ttsq will not speak."""
        source = body.ssml or ""
        try:
            if len(source) > OFF_LOOP_SSML_CHARS:
                document = await asyncio.to_thread(read_ssml, source, self.limits, body.speed)
            else:
                document = read_ssml(source, self.limits, body.speed)
        except SsmlError as exc:
            raise InvalidInput(SSML_FIELD, str(exc), _excerpt(source, exc)) from exc
        voices = await self._voices(document, caller)
        spoken = [number for number, span in enumerate(document.spans) if span.text]
        texts, paid = await self.dictionary.pronounced_texts(
            [document.spans[number].text for number in spoken], caller, self.max_text_chars, [SSML_FIELD] * len(spoken)
        )
        spans = list(document.spans)
        for number, text in zip(spoken, texts, strict=True):
            spans[number] = spans[number].retexted(self._checked(text))
        whole = self._checked(" ".join(span.text for span in spans if span.text))
        return ReadSsml(body.model_copy(update={"text": whole}), tuple(spans), voices, paid)

    def _checked(self, text: str) -> str:
        """``text`` cleaned and checked as a submit's text is (each span's, then the whole document's)."""
        try:
            return validate_text(text, self.max_text_chars)
        except TextError as exc:
            raise InvalidInput(SSML_FIELD, f"the document's {exc}", text[:200]) from exc

    async def _voices(self, document: SsmlDocument, caller: Principal) -> dict[str, Voice]:
        """Each ``<voice name>`` the document uses, resolved among the voices ``caller`` sees."""
        voices = {}
        for name, where in document.voices.items():
            try:
                voices[name] = await self.voicing.resolve_voice(name, caller, SSML_FIELD)
            except InvalidInput as exc:
                raise InvalidInput(SSML_FIELD, f"{where}: <voice name={name!r}>: {exc.message}", name[:200]) from exc
        return voices


def _excerpt(source: str, error: SsmlError) -> str:
    """What a refusal echoes of the document: the line it names (at most 200 characters around its column), else
    its start."""
    if error.position is None:
        return source[:200]
    lines = source.splitlines() or [""]
    line = lines[min(error.position.line, len(lines)) - 1]
    start = max(0, min(error.position.column - 1 - 100, len(line) - 200))
    return line[start : start + 200]
