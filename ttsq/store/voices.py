"""The voice registry: built-in voices, global voices, and each tenant's own voices, in Redis hashes.

A voice belongs to a tenant — the sharing scope of the key that made it (``tenant:<name>``, or ``key:<id>`` for a key
that is a tenant of its own: :attr:`ttsq.store.api_keys.ApiKey.sharing_scope`) — or is global by an admin's choice
(``owner`` None: the built-in voices and a shared catalogue). A tenant sees, and resolves names among, its own voices
and the global ones, never another tenant's: its own hash is the only one its names are looked up in besides the
global hash. Voices stored before voices had owners are in the global hash, so they became the global catalogue.

User voices survive API and worker restarts, and every replica sees the same set.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ttsq.domain.blends import BlendPart
from ttsq.domain.voices import BUILTIN_VOICES, OPENAI_VOICES, Voice, VoiceError, builtin, speaker_dimension
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys


class VoiceRegistry:
    """Built-in voices plus user voices in Redis: ``{ns}:voices`` (global) and ``{ns}:voices:<owner>`` (a tenant's),
    each a hash of name → JSON.

    Every method takes the ``owner`` whose view it acts in (None: the global catalogue alone). A name resolves to the
    owner's own voice first, then a global one; a tenant cannot make a voice under a global voice's name (it would hide
    it from itself), while a global voice made later under a name a tenant already uses stays hidden from that tenant
    by its own."""

    def __init__(self, redis: RedisClient, keys: Keys, speaker_dim: int | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.speaker_dim = speaker_dim

    def _hash(self, owner: str | None) -> str:
        return self.keys.voices if owner is None else self.keys.tenant_voices(owner)

    async def list(self, owner: str | None) -> list[Voice]:
        """The voices ``owner`` sees: built-in, then its own and the global ones by name (its own where both have one)."""
        stored = await self.redis.hgetall(self.keys.voices)
        users = {voice.name: voice for voice in map(Voice.model_validate_json, stored.values())}
        if owner is not None:
            own = await self.redis.hgetall(self.keys.tenant_voices(owner))
            users.update((voice.name, voice) for voice in map(Voice.model_validate_json, own.values()))
        builtins = [voice for name in sorted(BUILTIN_VOICES) if (voice := builtin(name)) is not None]
        return builtins + [users[name] for name in sorted(users)]

    async def get(self, name: str, owner: str | None) -> Voice | None:
        """The voice ``name`` means to ``owner``: built-in, its own, else global; None when it sees none by that name."""
        found = builtin(name)
        if found is not None:
            return found
        raw = None if owner is None else await self.redis.hget(self.keys.tenant_voices(owner), name)
        if raw is None:
            raw = await self.redis.hget(self.keys.voices, name)
        return None if raw is None else Voice.model_validate_json(raw)

    async def create(self, name: str, owner: str | None, *, seed: int | None = None, embedding: str | None = None) -> Voice:
        if (seed is None) == (embedding is None):
            raise VoiceError("give exactly one of seed or embedding", 422)
        await self.check_free(name, owner)
        if embedding is not None:
            try:
                dim = speaker_dimension(embedding)
            except ValueError as exc:
                raise VoiceError(str(exc), 422) from exc
            if self.speaker_dim is not None and dim != self.speaker_dim:
                raise VoiceError(f"the speaker embedding has {dim} values; this model's speakers have {self.speaker_dim}", 422)
        kind = "seed" if seed is not None else "embedding"
        return await self._store(Voice(name=name, kind=kind, seed=seed, embedding=embedding, created_at=time.time(), owner=owner))

    async def delete(self, name: str, owner: str | None) -> bool:
        """Delete the voice ``name`` means to ``owner`` (its own, else the global one); False when it sees none."""
        if name in BUILTIN_VOICES:
            raise VoiceError(f"{name!r} is a built-in voice and cannot be deleted", 409)
        if owner is not None and await self.redis.hdel(self.keys.tenant_voices(owner), name):
            return True
        return bool(await self.redis.hdel(self.keys.voices, name))

    async def check_free(self, name: str, owner: str | None) -> None:
        """Refuse, before any work is spent on it, a name that is built in, taken in ``owner``'s hash, or a global
        voice's (which a tenant's own would hide from it); :meth:`_store` checks its own hash again when it stores.
        Another tenant's names are never looked at: a 409 must not tell one tenant what another has."""
        if name in BUILTIN_VOICES or name in OPENAI_VOICES:
            raise VoiceError(f"{name!r} is a built-in voice name", 409)
        for where in {self._hash(owner), self.keys.voices}:
            if await self.redis.hexists(where, name):
                raise VoiceError(f"a voice named {name!r} already exists", 409)

    async def create_reference(self, name: str, owner: str | None, *, prompt: str, transcript: str) -> Voice:
        """Store a voice made from a recording: its speaker prompt and transcript (never the recording itself).

        Called only once a worker has encoded the recording, so a voice is stored whole or not at all.
        """
        await self.check_free(name, owner)
        voice = Voice(name=name, kind="reference", prompt=prompt, transcript=transcript, created_at=time.time(), owner=owner)
        return await self._store(voice)

    async def create_blend(self, name: str, owner: str | None, parts: Sequence[BlendPart]) -> Voice:
        """Store a blend as its recipe (:class:`~ttsq.domain.blends.BlendPart`: seeds and embeddings with weights),
        not as an embedding: the API cannot draw a seed's embedding (that is torch's generator, in the worker), and a
        recipe keeps the blend true to whichever checkpoint the workers load, as a seed voice is."""
        await self.check_free(name, owner)
        return await self._store(Voice(name=name, kind="blend", components=[*parts], created_at=time.time(), owner=owner))

    async def _store(self, voice: Voice) -> Voice:
        if not await self.redis.hsetnx(self._hash(voice.owner), voice.name, voice.model_dump_json()):
            raise VoiceError(f"a voice named {voice.name!r} already exists", 409)
        return voice
