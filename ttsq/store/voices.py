"""The voice registry: built-in voices plus user voices in one Redis hash.

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
    """Built-in voices plus user voices in Redis (``{ns}:voices``, a hash of name → JSON)."""

    def __init__(self, redis: RedisClient, keys: Keys, speaker_dim: int | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.speaker_dim = speaker_dim

    async def list(self) -> list[Voice]:
        stored = await self.redis.hgetall(self.keys.voices)
        users = [Voice.model_validate_json(raw) for raw in stored.values()]
        builtins = [voice for name in sorted(BUILTIN_VOICES) if (voice := builtin(name)) is not None]
        return builtins + sorted(users, key=lambda v: v.name)

    async def get(self, name: str) -> Voice | None:
        found = builtin(name)
        if found is not None:
            return found
        raw = await self.redis.hget(self.keys.voices, name)
        return None if raw is None else Voice.model_validate_json(raw)

    async def create(self, name: str, *, seed: int | None = None, embedding: str | None = None) -> Voice:
        if (seed is None) == (embedding is None):
            raise VoiceError("give exactly one of seed or embedding", 422)
        if name in BUILTIN_VOICES or name in OPENAI_VOICES:
            raise VoiceError(f"{name!r} is a built-in voice name", 409)
        if embedding is not None:
            try:
                dim = speaker_dimension(embedding)
            except ValueError as exc:
                raise VoiceError(str(exc), 422) from exc
            if self.speaker_dim is not None and dim != self.speaker_dim:
                raise VoiceError(f"the speaker embedding has {dim} values; this model's speakers have {self.speaker_dim}", 422)
        voice = Voice(
            name=name,
            kind="seed" if seed is not None else "embedding",
            seed=seed,
            embedding=embedding,
            created_at=time.time(),
        )
        if not await self.redis.hsetnx(self.keys.voices, name, voice.model_dump_json()):
            raise VoiceError(f"a voice named {name!r} already exists", 409)
        return voice

    async def delete(self, name: str) -> bool:
        if name in BUILTIN_VOICES:
            raise VoiceError(f"{name!r} is a built-in voice and cannot be deleted", 409)
        return bool(await self.redis.hdel(self.keys.voices, name))

    async def check_free(self, name: str) -> None:
        """Refuse, before any work is spent on it, a name that is built in or taken (:meth:`create_reference` checks
        again when it stores)."""
        if name in BUILTIN_VOICES or name in OPENAI_VOICES:
            raise VoiceError(f"{name!r} is a built-in voice name", 409)
        if await self.redis.hexists(self.keys.voices, name):
            raise VoiceError(f"a voice named {name!r} already exists", 409)

    async def create_reference(self, name: str, *, prompt: str, transcript: str) -> Voice:
        """Store a voice made from a recording: its speaker prompt and transcript (never the recording itself).

        Called only once a worker has encoded the recording, so a voice is stored whole or not at all.
        """
        await self.check_free(name)
        voice = Voice(name=name, kind="reference", prompt=prompt, transcript=transcript, created_at=time.time())
        if not await self.redis.hsetnx(self.keys.voices, name, voice.model_dump_json()):
            raise VoiceError(f"a voice named {name!r} already exists", 409)
        return voice

    async def create_blend(self, name: str, parts: Sequence[BlendPart]) -> Voice:
        """Store a blend as its recipe (:class:`~ttsq.domain.blends.BlendPart`: seeds and embeddings with weights),
        not as an embedding: the API cannot draw a seed's embedding (that is torch's generator, in the worker), and a
        recipe keeps the blend true to whichever checkpoint the workers load, as a seed voice is."""
        await self.check_free(name)
        voice = Voice(name=name, kind="blend", components=[*parts], created_at=time.time())
        if not await self.redis.hsetnx(self.keys.voices, name, voice.model_dump_json()):
            raise VoiceError(f"a voice named {name!r} already exists", 409)
        return voice
