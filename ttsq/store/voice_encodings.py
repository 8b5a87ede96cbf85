"""Encoding a reference recording into a speaker prompt: the API asks, a worker answers, over Redis.

The DVAE encoder is part of the model, which only workers load (the API process never imports torch). So
``POST /v1/voices`` with a recording decodes and checks it in the API (:mod:`ttsq.domain.reference_audio`), leaves
the samples in Redis under a fresh id with a TTL, pushes the id on one list, and blocks on a reply list of its own;
any worker pops the id between two decode steps, encodes the samples on its inference thread and pushes the prompt
(or the error) back. The API stores the voice only once the prompt has come back, so a failure, a timeout or an API
that dies while waiting leaves nothing half-stored: at most a request and a reply that expire on their own.

Workers need not be idle: an encoding of 30 s costs tens of milliseconds on a CPU with the real DVAE. A request
whose API gave up (its samples expired) is skipped.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

__all__ = ["EncodeFailed", "EncodeRequest", "EncodeTimedOut", "VoiceEncodings"]


class EncodeFailed(Exception):
    """The worker could not encode the recording; the message is its reason."""


class EncodeTimedOut(Exception):
    """No worker answered in time (none running, or all busy loading)."""


@dataclass(frozen=True)
class EncodeRequest:
    """One recording a worker took: the id to answer under and the samples (mono float32, 24 kHz)."""

    id: str
    samples: npt.NDArray[np.float32]


class VoiceEncodings:
    """Both sides of the exchange. ``block_s`` bounds every blocking read (below the Redis socket timeout)."""

    def __init__(self, redis: RedisClient, keys: Keys, block_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.redis = redis
        self.keys = keys
        self.block_s = block_s
        self.monotonic = monotonic

    # ---- the API's side ---------------------------------------------------------------------

    async def encode(self, samples: npt.NDArray[np.float32], timeout_s: float) -> str:
        """Have a worker encode ``samples``; the speaker prompt, or :class:`EncodeFailed` / :class:`EncodeTimedOut`."""
        request_id = secrets.token_hex(12)
        ttl = max(1, int(timeout_s) + 1)
        await self.redis.set(self.keys.voice_encode(request_id), np.asarray(samples, dtype="<f4").tobytes(), ex=ttl)
        await self.redis.rpush(self.keys.voice_encodes, request_id)
        deadline = self.monotonic() + timeout_s
        reply_key = self.keys.voice_encoded(request_id)
        try:
            while (remaining := deadline - self.monotonic()) > 0:
                popped = await self.redis.blpop([reply_key], timeout=max(0.01, min(remaining, self.block_s)))
                if popped is not None:
                    answer = json.loads(popped[1])
                    if "prompt" in answer:
                        return str(answer["prompt"])
                    raise EncodeFailed(str(answer.get("error", "the worker gave no reason")))
            raise EncodeTimedOut(f"no worker encoded the recording within {timeout_s:g} s")
        finally:
            await self.redis.delete(self.keys.voice_encode(request_id))

    # ---- a worker's side --------------------------------------------------------------------

    async def take(self) -> EncodeRequest | None:
        """The next waiting recording (waiting up to ``block_s``); None when none came or its API gave up."""
        popped = await self.redis.blpop([self.keys.voice_encodes], timeout=self.block_s)
        if popped is None:
            return None
        request_id = popped[1].decode() if isinstance(popped[1], bytes) else str(popped[1])
        raw = await self.redis.get(self.keys.voice_encode(request_id))
        if not isinstance(raw, bytes):
            return None
        return EncodeRequest(request_id, np.frombuffer(raw, dtype="<f4").astype(np.float32))

    async def answer(self, request: EncodeRequest, encode: Callable[[npt.NDArray[np.float32]], Awaitable[str]]) -> None:
        """Encode ``request`` with ``encode`` and push the prompt, or the failure's reason, to its waiting API."""
        try:
            answer = {"prompt": await encode(request.samples)}
        except Exception as exc:  # noqa: BLE001 - the reason goes back to the caller, whatever it is
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        reply_key = self.keys.voice_encoded(request.id)
        await self.redis.rpush(reply_key, json.dumps(answer))
        await self.redis.expire(reply_key, 60)
