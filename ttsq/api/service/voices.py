"""Voices: the stored ones a caller sees (its tenant's and the global ones), blends, voices made from a recording, and
a request's voice resolved among them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from ttsq.api.auth import Principal
from ttsq.api.service.common import InvalidInput, ServiceConfig, log, new_voice_owner, shown, viewed_owner, voice_owner
from ttsq.domain.blends import BlendError, BlendPart, blend_parts, is_blend, parse_blend
from ttsq.domain.reference_audio import ReferenceAudioError, check_reference, check_transcript, decode_reference
from ttsq.domain.voices import OPENAI_VOICES, Voice, VoiceError
from ttsq.store.voice_encodings import EncodeFailed, EncodeTimedOut, VoiceEncodings
from ttsq.store.voices import VoiceRegistry


class VoiceService:
    """The voices routes' use cases (``voices_api``) and a request's voice for every route that synthesises."""

    def __init__(self, voices: VoiceRegistry, encodings: VoiceEncodings, config: ServiceConfig) -> None:
        self.voices = voices
        self.encodings = encodings
        """Reference recordings → speaker prompts, by a worker (:meth:`create_reference_voice`)."""
        self.config = config

    async def resolve_voice(self, name: str, caller: Principal, field: str = "voice") -> Voice:
        """The named voice (or blend: :meth:`resolve_blend`) among those ``caller`` sees (:func:`voice_owner`), or
        :class:`InvalidInput` naming the field and the voices it sees — never another tenant's."""
        if is_blend(name):
            return await self.resolve_blend(name, caller, field)
        owner = voice_owner(caller)
        voice = await self.voices.get(name, owner)
        if voice is None:
            raise InvalidInput(field, f"unknown voice {name!r}; available: {await self._visible_names(owner)}", name)
        return voice

    async def resolve_named_voice(self, name: str, caller: Principal) -> Voice | None:
        """The voice ``name`` means to ``caller``, whole (to synthesise with: a reference voice's prompt included), or
        None when it sees none by that name."""
        return await self.voices.get(name, voice_owner(caller))

    async def resolve_any(self, name: str, caller: Principal, field: str = "voice") -> Voice:
        """A voice as the routes that speak another vendor's protocol take it (OpenAI's ``voice``, Cartesia's
        ``voice.id``, Google's ``voice.name``): OpenAI's names as the built-in voices they map onto, ttsq's names (those
        ``caller`` sees) as themselves, and blends of both; otherwise :class:`InvalidInput` naming ``field`` and every
        name it could have used. Never another vendor's voice id taken for something it is not."""
        if is_blend(name):
            return await self.resolve_blend(name, caller, field, OPENAI_VOICES)
        voice = await self.resolve_named_voice(OPENAI_VOICES.get(name, name), caller)
        if voice is None:
            known = ", ".join([*OPENAI_VOICES, *(v.name for v in await self.list_voices(caller))])
            raise InvalidInput(field, f"{name[:200]!r} is not supported; use one of: {known}", name[:200])
        return voice

    async def _visible_names(self, owner: str | None) -> str:
        return ", ".join(v.name for v in await self.voices.list(owner))

    async def resolve_blend(
        self, expression: str, caller: Principal, field: str = "voice", aliases: Mapping[str, str] | None = None
    ) -> Voice:
        """A blend written in a request (``"zh_female*0.7+narrator*0.3"``) as a voice of kind ``blend``: each name
        looked up among the voices ``caller`` sees (through ``aliases``: OpenAI's names on the OpenAI route), resolved
        to its seed or embedding and weighed (:func:`ttsq.domain.blends.blend_parts`); any problem is a 422 naming
        ``field``. A blend of any of the caller's own voices is its tenant's (``owner``), as its cache key must say."""
        try:
            terms = parse_blend(expression)
        except BlendError as exc:
            raise InvalidInput(field, str(exc), expression[:200]) from exc
        names = [(name if aliases is None else aliases.get(name, name), w) for name, w in terms]
        parts, owned = await self._blend_parts(names, voice_owner(caller), field)
        return Voice(name=expression, kind="blend", components=parts, owner=voice_owner(caller) if owned else None)

    async def _blend_parts(self, terms: Sequence[tuple[str, float]], owner: str | None, field: str) -> tuple[list[BlendPart], bool]:
        """The blend's parts among the voices ``owner`` sees, and whether any of them is ``owner``'s own."""
        voices: list[tuple[Voice, float]] = []
        for name, weight in terms:
            voice = await self.voices.get(name, owner)
            if voice is None:
                raise InvalidInput(
                    field, f"unknown voice {name!r} in the blend; available: {await self._visible_names(owner)}", name
                )
            voices.append((voice, weight))
        try:
            return blend_parts(voices), any(voice.owner is not None for voice, _ in voices)
        except BlendError as exc:
            raise InvalidInput(field, str(exc)) from exc

    async def list_voices(self, caller: Principal, tenant: str | None = None) -> list[Voice]:
        """The voices ``caller`` sees (:func:`voice_owner`; an admin may look as ``tenant`` does: :func:`viewed_owner`),
        as it may see them (:func:`shown`)."""
        return [shown(voice, caller) for voice in await self.voices.list(viewed_owner(caller, tenant))]

    async def get_voice(self, name: str, caller: Principal, tenant: str | None = None) -> Voice | None:
        """The voice ``name`` means to ``caller`` (or, for an admin, to ``tenant``), as it may see it; None when it sees
        none by that name — another tenant's voice is as absent as one that never existed."""
        voice = await self.voices.get(name, viewed_owner(caller, tenant))
        return None if voice is None else shown(voice, caller)

    async def create_voice(
        self,
        name: str,
        caller: Principal,
        *,
        seed: int | None,
        embedding: str | None,
        shared: bool = False,
        tenant: str | None = None,
    ) -> Voice:
        return await self.voices.create(name, new_voice_owner(caller, shared, tenant), seed=seed, embedding=embedding)

    async def create_blend_voice(
        self,
        name: str,
        components: Sequence[tuple[str, float]],
        caller: Principal,
        *,
        shared: bool = False,
        tenant: str | None = None,
    ) -> Voice:
        """A stored blend: its recipe, resolved now (seeds and embeddings with normalised weights) among the voices its
        owner sees, so it does not change when a component voice is deleted or re-created; the worker computes its
        embedding (docs/voices.md)."""
        owner = new_voice_owner(caller, shared, tenant)
        await self.voices.check_free(name, owner)
        parts, _ = await self._blend_parts(components, owner, "components")
        return await self.voices.create_blend(name, owner, parts)

    async def delete_voice(self, name: str, caller: Principal, tenant: str | None = None) -> bool:
        return await self.voices.delete(name, viewed_owner(caller, tenant))

    async def create_reference_voice(
        self, name: str, audio: bytes, transcript: str, caller: Principal, *, shared: bool = False, tenant: str | None = None
    ) -> Voice:
        """A voice from a recording and its transcript: checked here, encoded by a worker, stored only once encoded.

        The recording is decoded and resampled to 24 kHz mono in a thread (PyAV; no torch here), within bounds on its
        rate, length and decoding time read before and while it is decoded, refused with a 422
        naming ``audio`` or ``transcript`` (:mod:`ttsq.domain.reference_audio`), then handed to a worker's DVAE encoder
        (:mod:`ttsq.store.voice_encodings`). What is stored is ChatTTS's speaker prompt and the transcript; the
        recording is not kept anywhere (its samples expire from Redis once encoded or given up on).
        """
        owner = new_voice_owner(caller, shared, tenant)
        await self.voices.check_free(name, owner)
        try:
            samples = await asyncio.to_thread(decode_reference, audio, self.config.max_reference_s)
            duration = check_reference(samples, self.config.max_reference_s)
        except ReferenceAudioError as exc:
            raise InvalidInput("audio", str(exc)) from exc
        try:
            text = check_transcript(transcript, duration)
        except ReferenceAudioError as exc:
            raise InvalidInput("transcript", str(exc), transcript[:200]) from exc
        try:
            prompt = await self.encodings.encode(samples, self.config.voice_encode_timeout_s)
        except EncodeTimedOut as exc:
            raise VoiceError(f"{exc}; nothing was stored (are workers running?)", 503) from exc
        except EncodeFailed as exc:
            raise VoiceError(f"the recording could not be encoded: {exc}; nothing was stored", 422) from exc
        log.info("voice %s made from %.1f s of recording", name, duration)
        return await self.voices.create_reference(name, owner, prompt=prompt, transcript=text)
