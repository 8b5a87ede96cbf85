"""Dialogues: lines in several voices queued as one task, each line a segment of its job (:mod:`ttsq.domain.segments`).

A dialogue is submitted like a text (:meth:`TaskService.submit_params`: the cache, single-flight, the queue, the
caller's token, webhooks), so polling, streaming, captions and the cache serve it as they serve any task. What is
its own is here: the lines read (a list, or a script), every speaker's voice resolved among the voices the caller
sees (a speaker without one is refused, named), each line's text checked and rewritten by the caller's pronunciation
dictionary as a submit's text is, the limits (``MAX_DIALOGUE_LINES``, ``MAX_DIALOGUE_CHARS``), and each line's
sampling: the dialogue's (its ``style`` resolved under its own fields, as a submit's is), overridden by the line's
style's and then by the line's own fields (:func:`ttsq.domain.sampling.overridden`: the refine levels' rules hold
per line).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ttsq.api.auth import Principal
from ttsq.api.dialogue_schemas import DialogueRequest, overrides
from ttsq.api.service.common import InvalidInput, ServiceConfig
from ttsq.api.service.styles import StyleService
from ttsq.api.service.tasks import Submitted, TaskService
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.cache_key import cache_key
from ttsq.domain.dialogue import ScriptError, read_script
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, TTSParams
from ttsq.domain.sampling import Sampling, overridden
from ttsq.domain.segments import Segment, speakable
from ttsq.domain.text import TextError, spoken_length, validate_text
from ttsq.domain.voices import Voice

__all__ = ["DialogueService", "Line"]

Line = tuple[str, str, dict[str, Any]]
"""One line as the use case takes it: speaker, text as sent, and its sampling overrides (its style's beneath its own)."""


class DialogueService:
    """Submit a dialogue (native and ElevenLabs-shaped routes alike)."""

    def __init__(self, tasks: TaskService, config: ServiceConfig) -> None:
        self.tasks = tasks
        self.config = config

    async def submit(
        self, body: DialogueRequest, caller: Principal, field: str | None = None, *, listen: bool = False
    ) -> Submitted:
        """Queue ``body``'s lines as one task (or answer it from the cache). ``field`` names the lines in refusals
        (``lines``, ``script``; the ElevenLabs route's ``inputs``); ``listen``: the caller hears it as it is made
        (:attr:`ttsq.domain.jobs.TTSParams.listened`)."""
        if body.style is not None:
            body = await self._styling.applied(body, caller, body.style)
        if body.lines is not None:
            lines: list[Line] = []
            for number, line in enumerate(body.lines):
                own = overrides(line)
                if line.style is not None:
                    style = await self._styling.resolve_style(line.style, caller, f"lines.{number}.style")
                    own = style.beneath(own)
                lines.append((line.speaker, line.text, own))
        else:
            try:
                lines = [(speaker, text, {}) for speaker, text in read_script(body.script or "")]
            except ScriptError as exc:
                raise InvalidInput("script", str(exc), (body.script or "")[:200]) from exc
        field = field or ("lines" if body.lines is not None else "script")
        if not lines:  # a job of no segments is no job: a worker could not even read it back
            raise InvalidInput(field, "the dialogue has no lines: give at least one")
        limit = self.config.max_dialogue_lines
        if len(lines) > limit:
            raise InvalidInput(field, f"the dialogue has {len(lines)} lines; the limit is {limit} (MAX_DIALOGUE_LINES)")
        voices = await self._voices(body, [speaker for speaker, _, _ in lines], caller)
        names = [f"{field}.{number}.text" if field != "script" else "script" for number in range(len(lines))]
        texts, paid = await self.tasks.dictionary.pronounced_texts(
            [text for _, text, _ in lines], caller, self.config.max_dialogue_chars, names
        )
        cleaned = self._checked([speaker for speaker, _, _ in lines], texts, names)
        consistent = self.config.consistent_voice if body.consistent_voice is None else body.consistent_voice
        gap = round(body.gap_ms * SAMPLE_RATE / 1000)
        segments = []
        for number, ((speaker, _, own), text) in enumerate(zip(lines, cleaned, strict=True)):
            voice = voices[speaker]
            sampling = self._sampling(body.sampling, own, f"{field}.{number}") if own else None
            segments.append(
                Segment.model_construct(
                    text=text,
                    voice=voice.name,
                    voice_owner=voice.owner,
                    speaker_seed=voice.seed,
                    speaker_embedding=voice.embedding,
                    speaker_prompt=voice.prompt,
                    prompt_text=voice.transcript,
                    speaker_blend=voice.components,
                    consistent_voice=consistent and voice.prompt is None,
                    sampling=None if sampling == body.sampling else sampling,
                    pause_samples=gap if number else None,
                    speaker=speaker,
                )
            )
        params = TTSParams.model_construct(
            text="\n".join(f"{speaker}: {text}" for (speaker, _, _), text in zip(lines, cleaned, strict=True)),
            segments=segments,
            seed=DEFAULT_SAMPLING_SEED if body.seed is None else body.seed,
            format=body.format,
            deterministic=True,
            listened=listen or body.listen,
            **dict(body.sampling),
        )
        params.cache_key = cache_key(params, self.config.model_identity, self.tasks.sharing_scope(caller))
        return await self.tasks.submit_params(params, caller, callback_url=body.callback_url, priority=body.priority, paid=paid)

    @property
    def _styling(self) -> StyleService:
        if self.tasks.styling is None:
            raise InvalidInput("style", "styles are not served here")
        return self.tasks.styling

    @staticmethod
    def _sampling(dialogue: Sampling, own: dict[str, Any], name: str) -> Sampling:
        """A line's sampling: the dialogue's with the line's own over it, validated again as one record (whatever ties
        the sampling fields together holds for a line's own mix too); a mix that does not hold is refused naming the
        line."""
        try:
            return overridden(dialogue, own)
        except ValidationError as exc:
            said = "; ".join(dict.fromkeys(error["msg"] for error in exc.errors()))
            raise InvalidInput(name, f"this line's sampling with the dialogue's: {said}", own) from exc

    async def _voices(self, body: DialogueRequest, speakers: list[str], caller: Principal) -> dict[str, Voice]:
        """Every speaker's voice, resolved among those ``caller`` sees (each named voice once); a speaker without one
        in ``voices`` is refused, all of them named."""
        missing = sorted({speaker for speaker in speakers if speaker not in body.voices})
        if missing:
            named = ", ".join(repr(speaker) for speaker in missing)
            raise InvalidInput("voices", f"no voice for {named}: every speaker needs one in `voices`", sorted(body.voices)[:20])
        resolved: dict[str, Voice] = {}
        voices: dict[str, Voice] = {}
        for speaker in dict.fromkeys(speakers):
            name = body.voices[speaker]
            if name not in resolved:
                resolved[name] = await self.tasks.voicing.resolve_voice(name, caller, f"voices.{speaker}")
            voices[speaker] = resolved[name]
        return voices

    def _checked(self, speakers: list[str], texts: list[str], names: list[str]) -> list[str]:
        """Each line cleaned and checked as a submit's text is, and the whole within ``MAX_DIALOGUE_CHARS`` as it will
        be read (digits read aloud count as several characters)."""
        limit = self.config.max_dialogue_chars
        cleaned = []
        for number, (speaker, text, name) in enumerate(zip(speakers, texts, names, strict=True), start=1):
            try:
                cleaned.append(validate_text(text, limit))
            except TextError as exc:
                raise InvalidInput(name, f"line {number} ({speaker}): {exc}", text[:200]) from exc
        if not any(speakable(text) for text in cleaned):  # a line of punctuation alone is a pause; all of them, nothing
            said = "the dialogue has nothing to read aloud: no line holds a letter, digit or ideograph"
            raise InvalidInput(names[0].split(".")[0], said)
        total = sum(spoken_length(text)[0] for text in cleaned)
        if total > limit:
            raise InvalidInput(
                names[0].split(".")[0],
                f"the dialogue reads as about {total} characters (its lines together, digits read aloud); the limit is "
                f"{limit} (MAX_DIALOGUE_CHARS)",
            )
        return cleaned
