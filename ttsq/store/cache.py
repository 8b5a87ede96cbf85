"""The three-level result cache: in-process LRU (L1), Redis (L2), local disk (L3).

Entries are the *encoded* audio of one deterministic request in one format, keyed by
:func:`ttsq.domain.cache_key.cache_key`. Caching the encoded bytes (rather than the waveform) makes a hit
cost no CPU at all; the price is that each format is cached separately, which is cheap because
the key already includes the format.

Reads go L1 → L2 → L3 and fill the faster levels on the way back. Each level degrades on its
own: a Redis error or a full or unwritable disk makes that level miss (with a warning), it
never fails the request. L2 may live on its own Redis (``CACHE_REDIS_URL``) with an LRU eviction
policy, because the queue's Redis must never evict job keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import struct
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiofiles
import aiofiles.os

from ttsq.domain.captions import Cue
from ttsq.store.connection import STORE_ERRORS, RedisClient
from ttsq.store.keys import Shards

log = logging.getLogger(__name__)

Level = Literal["l1", "l2", "l3"]
LEVELS: tuple[Level, ...] = ("l1", "l2", "l3")


@dataclass(frozen=True)
class CacheConfig:
    """The cache's levels and bounds. Built from settings by ``settings.py``."""

    enabled: bool
    namespace: str
    shards: int
    """Queue shards: an L2 entry lives on the shard its cache key places jobs on (so entries spread over a cluster)."""
    l1_max_bytes: int
    l2_ttl_s: int
    l2_max_entry_bytes: int
    l3_dir: Path | None
    l3_max_bytes: int


@dataclass(frozen=True)
class CachedAudio:
    """One cache entry: the encoded audio and what a client needs to know about it."""

    audio: bytes
    content_type: str
    duration_s: float
    captions: list[Cue] | None = None
    """The result's cues (:mod:`ttsq.domain.captions`), so that a task answered from the cache has them too."""

    def pack(self) -> bytes:
        meta: dict[str, Any] = {"content_type": self.content_type, "duration_s": self.duration_s}
        if self.captions:
            meta["captions"] = [cue.model_dump() for cue in self.captions]
        encoded = json.dumps(meta).encode()
        return struct.pack(">I", len(encoded)) + encoded + self.audio

    @classmethod
    def unpack(cls, blob: bytes) -> CachedAudio:
        (meta_len,) = struct.unpack(">I", blob[:4])
        meta = json.loads(blob[4 : 4 + meta_len])
        captions = [Cue.model_validate(cue) for cue in meta["captions"]] if meta.get("captions") else None
        return cls(
            audio=blob[4 + meta_len :],
            content_type=str(meta["content_type"]),
            duration_s=float(meta["duration_s"]),
            captions=captions,
        )

    @property
    def size(self) -> int:
        return len(self.audio) + 64


@dataclass(frozen=True)
class CacheHit:
    entry: CachedAudio
    level: Level


class CacheStats:
    """Hits, misses and writes per level; ``ttsq.store.metrics`` exports them to Prometheus."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {level: {"hits": self.hits[level], "misses": self.misses[level]} for level in LEVELS}


class MemoryLRU:
    """L1: least-recently-used entries, bounded by their total size in bytes (not their count)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[str, CachedAudio] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CachedAudio | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: CachedAudio) -> None:
        if entry.size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[key] = entry
        self.bytes += entry.size
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.size
            self.evictions += 1


_MAGIC = b"TTSQC1"
_HEADER = struct.Struct(">6s32sQ")
"""L3 file header: magic, sha256 of the payload, payload length — a torn or corrupt file is detected."""


class DiskCache:
    """L3: content-addressed files under one directory, bounded in total size, LRU by mtime.

    File names are the hex cache key (itself a sha256), never anything a user typed. Writes go to
    a temporary file in the same directory and are renamed into place, so a reader never sees a
    half-written entry and a crash leaves at worst a stray temp file (removed at start-up).
    """

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.bytes = 0
        self.writable = True
        self.evictions = 0
        self._sizes: dict[Path, int] = {}
        self._lock = asyncio.Lock()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for path in directory.glob("*/*"):
                if path.name.endswith(".tmp"):
                    path.unlink(missing_ok=True)
                else:
                    self._sizes[path] = path.stat().st_size
            self.bytes = sum(self._sizes.values())
        except OSError as exc:
            self._degrade(exc)

    def path_of(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError("cache keys are sha256 hex digests")
        return self.directory / key[:2] / key

    def _degrade(self, exc: OSError) -> None:
        if self.writable:
            log.warning("disk cache %s is unusable (%s); continuing with memory and Redis only", self.directory, exc)
        self.writable = False

    async def get(self, key: str) -> CachedAudio | None:
        path = self.path_of(key)
        try:
            async with aiofiles.open(path, "rb") as handle:
                blob = await handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("disk cache read failed for %s: %s", path.name, exc)
            return None
        entry = self._verify(blob)
        if entry is None:
            log.warning("disk cache entry %s is corrupt or truncated; deleting it", path.name)
            await self._remove(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        return entry

    @staticmethod
    def _verify(blob: bytes) -> CachedAudio | None:
        if len(blob) < _HEADER.size:
            return None
        magic, digest, length = _HEADER.unpack_from(blob)
        payload = blob[_HEADER.size :]
        if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
            return None
        try:
            return CachedAudio.unpack(payload)
        except (ValueError, KeyError, struct.error):
            return None

    async def put(self, key: str, entry: CachedAudio) -> bool:
        """Write an entry; False when it was not written (too large, or the disk failed)."""
        if not self.writable:
            return False
        path = self.path_of(key)
        payload = entry.pack()
        blob = _HEADER.pack(_MAGIC, hashlib.sha256(payload).digest(), len(payload)) + payload
        if len(blob) > self.max_bytes:
            return False
        temp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            await aiofiles.os.makedirs(path.parent, exist_ok=True)
            async with aiofiles.open(temp, "wb") as handle:
                await handle.write(blob)
            await aiofiles.os.replace(temp, path)
        except OSError as exc:
            self._degrade(exc)
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            return False
        async with self._lock:
            self.bytes += len(blob) - self._sizes.get(path, 0)
            self._sizes[path] = len(blob)
            if self.bytes > self.max_bytes:
                await self._evict()
        return True

    async def _evict(self) -> None:
        """Drop least-recently-used files (oldest mtime; reads touch it) until under the bound."""
        by_age = sorted(self._sizes, key=_mtime)
        for path in by_age:
            if self.bytes <= self.max_bytes * 0.9:
                break
            await self._remove(path)
            self.evictions += 1

    async def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            await aiofiles.os.remove(path)
        self.bytes -= self._sizes.pop(path, 0)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class ResultCache:
    """The three levels behind one get/put. ``redis`` is the cache's Redis (may be the queue's)."""

    def __init__(self, redis: RedisClient, config: CacheConfig) -> None:
        self.redis = redis
        self.config = config
        self.shards = Shards(config.namespace, config.shards)
        self.stats = CacheStats()
        self.l1 = MemoryLRU(config.l1_max_bytes)
        self.l3 = DiskCache(config.l3_dir, config.l3_max_bytes) if config.l3_dir is not None else None

    def l2_key(self, key: str) -> str:
        """Where an entry lives in Redis (L2): on the shard its cache key places jobs on."""
        return self.shards.place(key).cache(key)

    async def get(self, key: str) -> CachedAudio | None:
        hit = await self.find(key)
        return hit.entry if hit is not None else None

    async def find(self, key: str) -> CacheHit | None:
        """The entry and the level that had it, or None."""
        if not self.config.enabled:
            return None
        entry = self.l1.get(key)
        if entry is not None:
            self.stats.hits["l1"] += 1
            return CacheHit(entry, "l1")
        self.stats.misses["l1"] += 1
        entry = await self._get_l2(key)
        if entry is not None:
            self.stats.hits["l2"] += 1
            self._put_l1(key, entry)
            return CacheHit(entry, "l2")
        self.stats.misses["l2"] += 1
        if self.l3 is not None:
            entry = await self.l3.get(key)
            if entry is not None:
                self.stats.hits["l3"] += 1
                self._put_l1(key, entry)
                await self._put_l2(key, entry)
                return CacheHit(entry, "l3")
            self.stats.misses["l3"] += 1
        return None

    async def put(self, key: str, entry: CachedAudio) -> None:
        if not self.config.enabled:
            return
        self._put_l1(key, entry)
        await self._put_l2(key, entry)
        if self.l3 is not None and await self.l3.put(key, entry):
            self.stats.puts["l3"] += 1

    def _put_l1(self, key: str, entry: CachedAudio) -> None:
        self.l1.put(key, entry)
        self.stats.puts["l1"] += 1

    async def _get_l2(self, key: str) -> CachedAudio | None:
        try:
            blob = await self.redis.get(self.l2_key(key))
        except (*STORE_ERRORS, OSError) as exc:
            log.warning("L2 cache read failed: %s", exc)
            return None
        if not isinstance(blob, bytes):
            return None
        try:
            return CachedAudio.unpack(blob)
        except (ValueError, KeyError, struct.error):
            return None

    async def _put_l2(self, key: str, entry: CachedAudio) -> None:
        blob = entry.pack()
        if len(blob) > self.config.l2_max_entry_bytes:
            return
        try:
            await self.redis.set(self.l2_key(key), blob, ex=self.config.l2_ttl_s)
        except (*STORE_ERRORS, OSError) as exc:
            log.warning("L2 cache write failed: %s", exc)
            return
        self.stats.puts["l2"] += 1
