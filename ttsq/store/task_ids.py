"""Signed task ids: forged or random ids are refused without touching Redis.

An id is ``<uuid4>.<tag>`` where the tag is a truncated HMAC-SHA256 of the UUID under a secret
shared by every API replica; a job placed on a queue shard other than the first names the shard's
label after the UUID, signed with it (``<uuid4>_<label>.<tag>``, :func:`ttsq.store.keys.shard_label`).
Checking it is pure CPU, so a flood of made-up ids (cache penetration) costs Redis nothing, and —
unlike a per-process Bloom filter of issued ids — every replica accepts every other replica's ids,
including ids issued before a restart.

The secret is ``TASK_ID_SECRET``, or, when that is unset, one drawn at random and kept in Redis
(:class:`SharedTaskIdSecret`), so that the replicas still share it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
import uuid
from collections.abc import Callable

from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

log = logging.getLogger(__name__)

_TAG_BYTES = 12
_KEEP_EVERY_S = 1.0
"""The most often a replica checks that Redis still holds the secret it signs with."""


class TaskIdSigner:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the task-id secret must be at least 16 bytes")
        self._secret = secret

    def _tag(self, random_part: str) -> str:
        digest = hmac.new(self._secret, random_part.encode(), hashlib.sha256).digest()[:_TAG_BYTES]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def new(self, shard: str = "") -> str:
        """A fresh id: 122 random bits from the OS CSPRNG (uuid4), the queue shard's label if any, its 96-bit tag."""
        random_part = str(uuid.uuid4()) + (f"_{shard}" if shard else "")
        return f"{random_part}.{self._tag(random_part)}"

    def verify(self, task_id: str) -> bool:
        random_part, dot, tag = task_id.partition(".")
        uuid_part, underscore, shard = random_part.partition("_")
        if not dot or len(uuid_part) != 36 or len(tag) != 16 or (underscore and not (shard.isdigit() and len(shard) <= 6)):
            return False
        return hmac.compare_digest(tag, self._tag(random_part))


class SharedTaskIdSecret:
    """A random secret stored once in Redis, so every API replica signs task ids alike.

    The secret handed out (:meth:`fetch`) is remembered: a replica keeps signing with it for its
    whole life, so if Redis loses it (restarted without persistence), :meth:`keep` puts it back, and
    a replica started after the loss adopts it instead of drawing a new one that would make the two
    replicas answer 404 for each other's task ids. A replica that never fetched it (one with
    ``TASK_ID_SECRET``) never writes one.
    """

    def __init__(self, redis: RedisClient, keys: Keys, clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.keys = keys
        self.clock = clock
        self._secret: bytes | None = None
        self._kept_at = float("-inf")

    async def fetch(self) -> bytes:
        """The shared secret: the one in Redis, or a new one stored there if there is none yet."""
        await self.redis.set(self.keys.task_id_secret, secrets.token_bytes(32), nx=True)
        secret = await self.redis.get(self.keys.task_id_secret)
        if not isinstance(secret, bytes):
            raise RuntimeError("the shared task-id secret vanished from Redis")
        self._secret = secret
        self._kept_at = self.clock()
        return secret

    async def keep(self) -> None:
        """Store the secret this replica signs with again if Redis has lost it (at most once a second).

        The API runs it before every enqueue and readiness check, so after a data loss the replicas that
        were already running restore their common secret as soon as they serve anything. A replica that
        started after the loss and signed ids before any older one came back still disagrees with them
        (its SET NX came first): only a configured ``TASK_ID_SECRET`` rules that out, and the log line says so.
        """
        secret, now = self._secret, self.clock()
        if secret is None or now - self._kept_at < _KEEP_EVERY_S:
            return
        self._kept_at = now
        if await self.redis.set(self.keys.task_id_secret, secret, nx=True):
            log.warning(
                "Redis had lost the shared task-id secret (restarted without persistence?); stored this replica's again "
                "so that replicas keep accepting each other's task ids (set TASK_ID_SECRET to rule this out)"
            )
