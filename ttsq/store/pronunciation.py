"""The pronunciation dictionary in Redis, and each API process's copy of it in memory.

Entries live in one hash on the home shard (``{ns}:pronunciation``, id → JSON); every change also bumps a version
counter (``{ns}:pronunciation:version``) in the same transaction. A submit never reads the hash: it uses the
process's :class:`~ttsq.domain.pronunciation.Dictionary`, and at most once per ``refresh_s`` (on this process's
monotonic clock) one ``GET`` of the version tells whether another replica changed it — only then is the hash read
again. A change made through this process is seen by its next submit; through another replica, within
``refresh_s``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping

from redis.exceptions import WatchError

from ttsq.domain.pronunciation import (
    Dictionary,
    DictionaryError,
    DictionaryLimits,
    EntryKind,
    EntryLanguage,
    PronunciationEntry,
    check_entry,
)
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

__all__ = ["PronunciationStore"]


class EntryConflict(DictionaryError):
    """The entry cannot be added beside the ones stored (a duplicate, or its scope is full): a 409."""


class PronunciationStore:
    """Create, list and delete entries; :meth:`dictionary` is the current dictionary, refreshed cheaply."""

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        limits: DictionaryLimits,
        *,
        max_entries: int,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.limits = limits
        self.max_entries = max_entries
        """Entries one scope may hold."""
        self.refresh_s = refresh_s
        self.clock = clock
        self._current = Dictionary([], 0, limits.regex_timeout_s)
        self._next_check = float("-inf")
        self._lock = asyncio.Lock()

    async def create(
        self,
        *,
        kind: EntryKind,
        match: str,
        replacement: str,
        language: EntryLanguage = "auto",
        scope: str = "global",
        case_sensitive: bool = False,
    ) -> PronunciationEntry:
        """Check and store an entry; :class:`DictionaryError` (a 422) or :class:`EntryConflict` (a 409)."""
        entry = PronunciationEntry(
            id=uuid.uuid4().hex[:12],
            kind=kind,
            match=match,
            replacement=replacement,
            language=language,
            scope=scope,
            case_sensitive=case_sensitive,
            created_at=time.time(),
        )
        check_entry(entry, self.limits)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:  # optimistic: two admins adding at once must not pass the cap together
                try:
                    await pipe.watch(self.keys.pronunciation)
                    same_scope = [e for e in _entries(await pipe.hgetall(self.keys.pronunciation)) if e.scope == entry.scope]
                    if len(same_scope) >= self.max_entries:
                        raise EntryConflict("scope", f"scope {entry.scope!r} holds {len(same_scope)} entries, the limit")
                    twin = next((e for e in same_scope if _same_rule(e, entry)), None)
                    if twin is not None:
                        raise EntryConflict("match", f"entry {twin.id} already has this {entry.kind} for this scope and language")
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                    pipe.hset(self.keys.pronunciation, entry.id, entry.model_dump_json())
                    pipe.incr(self.keys.pronunciation_version)
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        self._next_check = float("-inf")  # this process's next submit sees it
        return entry

    async def list(self, scope: str | None = None) -> list[PronunciationEntry]:
        """Every entry (of ``scope`` only, when given), oldest first."""
        entries = _entries(await self.redis.hgetall(self.keys.pronunciation))
        return sorted((e for e in entries if scope is None or e.scope == scope), key=lambda e: (e.created_at, e.id))

    async def delete(self, entry_id: str) -> bool:
        """Remove an entry; False when there was none by that id."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self.keys.pronunciation, entry_id)
            pipe.incr(self.keys.pronunciation_version)
            removed, _ = await pipe.execute()
        self._next_check = float("-inf")
        return bool(removed)

    async def dictionary(self) -> Dictionary:
        """The dictionary as of at most ``refresh_s`` ago: one ``GET`` per ``refresh_s``, the hash only on a change."""
        if self.clock() < self._next_check:
            return self._current
        async with self._lock:
            if self.clock() >= self._next_check:
                raw = await self.redis.get(self.keys.pronunciation_version)
                version = int(raw or 0)
                if version != self._current.version:
                    entries = _entries(await self.redis.hgetall(self.keys.pronunciation))
                    self._current = Dictionary(entries, version, self.limits.regex_timeout_s)
                self._next_check = self.clock() + self.refresh_s
        return self._current


def _entries(stored: Mapping[bytes | str, bytes | str]) -> list[PronunciationEntry]:
    return [PronunciationEntry.model_validate_json(raw) for raw in stored.values()]


def _same_rule(a: PronunciationEntry, b: PronunciationEntry) -> bool:
    """Two entries of one scope that would compete for the same text: same kind, language and match."""
    if (a.kind, a.language) != (b.kind, b.language):
        return False
    if a.kind == "word" and not a.case_sensitive and not b.case_sensitive:
        return a.match.casefold() == b.match.casefold()
    return a.match == b.match and a.case_sensitive == b.case_sensitive
