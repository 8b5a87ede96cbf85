"""API keys: random, shown once, stored as a SHA-256 digest, revocable at once on every replica.

A key looks like ``ttsq_<id>_<secret>``: the id (public, 12 hex characters) names the record in
Redis, the secret (32 random bytes) is what proves possession. Only the SHA-256 of the whole key is
stored — keys are long random strings, so a fast hash is as good as a slow one and a leaked Redis
dump reveals no usable key. Every request looks its key up, so a revocation (deleting the record)
holds on every API replica from the next request on.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field
from redis.exceptions import WatchError

from ttsq.domain.jobs import Priority
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

Scope = Literal["tts", "admin", "metrics"]
SCOPES: tuple[Scope, ...] = ("tts", "admin", "metrics")
"""``tts``: submit, read, stream and cancel one's own tasks, list voices. ``admin``: everything, incl. voices and dead letters.
``metrics``: read ``/metrics`` where keys are required (what Prometheus is given), nothing else."""

MAX_WEIGHT = 1000
"""The largest weight an admin may give a key: a tenant's turn is at most this many claims in a row."""

_KEY = re.compile(r"ttsq_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A tenant's name: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit."""


class ApiKey(BaseModel):
    """What the store keeps about a key (never the key itself)."""

    id: str
    name: str
    scopes: list[Scope]
    created_at: float
    expires_at: float | None = None
    callback_url: str | None = Field(default=None, description="Default completion webhook for this key's submits.")
    tenant: str | None = Field(
        default=None,
        description="The tenant an admin grouped this key into: its keys share cached results and jobs in flight "
        "(CACHE_SCOPE=tenant); None = the key is a tenant of its own.",
    )
    weight: int = Field(
        default=1,
        ge=1,
        le=MAX_WEIGHT,
        description="The key's tenant's share of the workers: claims per deficit-round-robin turn (docs/fairness.md).",
    )
    priority: Priority = Field(default="interactive", description="The lane of this key's submits that name none.")
    digest: str = Field(description="SHA-256 of the whole key, hex.")

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def sharing_scope(self) -> str:
        """Whom this key shares cached results and jobs in flight with: its tenant's keys, or itself alone."""
        return f"tenant:{self.tenant}" if self.tenant is not None else f"key:{self.id}"


def looks_like_key(value: str) -> bool:
    """Shaped like a ttsq key (``ttsq_<12 hex>_<43 url-safe>``), valid or not."""
    return _KEY.fullmatch(value) is not None


def _check_tenant(tenant: str | None) -> None:
    if tenant is not None and TENANT.fullmatch(tenant) is None:
        raise ValueError(f"a tenant is 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit); got {tenant!r}")


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyStore:
    def __init__(self, redis: RedisClient, keys: Keys, clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.keys = keys
        self.clock = clock

    async def create(
        self,
        name: str,
        scopes: list[Scope],
        *,
        expires_at: float | None = None,
        callback_url: str | None = None,
        tenant: str | None = None,
        weight: int = 1,
        priority: Priority = "interactive",
    ) -> tuple[str, ApiKey]:
        """A new key and its record; the key is returned once and never stored."""
        unknown = set(scopes) - set(SCOPES)
        if unknown or not scopes:
            raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)}; got {', '.join(scopes) or 'none'}")
        _check_tenant(tenant)
        key_id = secrets.token_hex(6)
        key = f"ttsq_{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKey(
            weight=weight,
            priority=priority,
            id=key_id,
            name=name,
            scopes=sorted(set(scopes)),
            created_at=self.clock(),
            expires_at=expires_at,
            callback_url=callback_url,
            tenant=tenant,
            digest=_digest(key),
        )
        await self.redis.hset(self.keys.api_keys, key_id, record.model_dump_json())
        return key, record

    async def authenticate(self, key: str) -> ApiKey | None:
        """The key's record when the key is genuine, not revoked and not expired; else None."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        raw = await self.redis.hget(self.keys.api_keys, match.group(1))
        if raw is None:
            return None
        record = ApiKey.model_validate_json(raw)
        if not hmac.compare_digest(record.digest, _digest(key)) or record.expired(self.clock()):
            return None
        return record

    async def still_valid(self, record: ApiKey) -> bool:
        """Whether a key authenticated earlier is still neither revoked nor expired (a long stream asks again)."""
        raw = await self.redis.hget(self.keys.api_keys, record.id)
        if raw is None:
            return False
        current = ApiKey.model_validate_json(raw)
        return current.digest == record.digest and not current.expired(self.clock())

    async def list(self) -> list[ApiKey]:
        stored = await self.redis.hgetall(self.keys.api_keys)
        return sorted((ApiKey.model_validate_json(raw) for raw in stored.values()), key=lambda k: k.created_at)

    async def set_tenant(self, key_id: str, tenant: str | None) -> ApiKey | None:
        """Group a key into ``tenant`` (None: a tenant of its own); the key's record, or None when there is none.

        Applies from the key's next request on. Results the key shared before stay with its old scope (they
        expire with the cache); jobs already in flight keep the readers they had.
        """
        _check_tenant(tenant)
        return await self._update(key_id, {"tenant": tenant})

    async def set_weight(self, key_id: str, weight: int) -> ApiKey | None:
        """Give a key a new weight (its tenant's claims per turn), kept with the key; the record, or None when there is
        no such key. Its queued jobs' shard records it at the key's next submit (docs/fairness.md)."""
        if not 1 <= weight <= MAX_WEIGHT:
            raise ValueError(f"a weight is 1-{MAX_WEIGHT}; got {weight}")
        return await self._update(key_id, {"weight": weight})

    async def _update(self, key_id: str, update: dict[str, Any]) -> ApiKey | None:
        """Change fields of a key's record; the record, or None when there is no such key."""
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:  # optimistic: a revocation in between must not bring the record back
                try:
                    await pipe.watch(self.keys.api_keys)
                    raw = await pipe.hget(self.keys.api_keys, key_id)
                    if raw is None:
                        return None
                    record = ApiKey.model_validate_json(raw).model_copy(update=update)
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                    pipe.hset(self.keys.api_keys, key_id, record.model_dump_json())
                    await pipe.execute()
                    return record
                except WatchError:
                    continue

    async def revoke(self, key_id: str) -> bool:
        """Delete the record: every replica refuses the key from its next request on."""
        return bool(await self.redis.hdel(self.keys.api_keys, key_id))
