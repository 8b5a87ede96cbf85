"""The three cache levels against a real Redis and a real directory."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from tests.conftest import settings
from tests.support.redis_server import free_port
from ttsq.store.cache import CacheConfig, CachedAudio, DiskCache, MemoryLRU, ResultCache
from ttsq.store.connection import create_redis

ROOT = Path(__file__).resolve().parents[3]


def key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def entry(size: int, fill: bytes = b"a") -> CachedAudio:
    return CachedAudio(audio=fill * size, content_type="audio/wav", duration_s=size / 48000)


def test_memory_lru_is_bounded_in_bytes_and_evicts_the_least_recent() -> None:
    lru = MemoryLRU(max_bytes=3 * entry(1000).size)
    for n in range(3):
        lru.put(key(n), entry(1000))
    assert lru.get(key(0)) is not None
    lru.put(key(3), entry(1000))
    assert lru.get(key(1)) is None, "the least recently used entry goes first"
    assert lru.get(key(0)) is not None and lru.get(key(3)) is not None
    assert lru.bytes <= lru.max_bytes
    lru.put(key(9), entry(10_000))
    assert lru.get(key(9)) is None, "an entry larger than the whole bound is not cached"
    assert len(lru) == 3


async def test_disk_cache_round_trip_survives_a_restart(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path / "l3", max_bytes=10**6)
    await disk.put(key(1), entry(500, b"x"))
    again = DiskCache(tmp_path / "l3", max_bytes=10**6)
    got = await again.get(key(1))
    assert got == entry(500, b"x")
    assert again.bytes == disk.bytes > 500
    path = again.path_of(key(1))
    assert path.parent.parent == tmp_path / "l3" and path.name == key(1)
    assert not list((tmp_path / "l3").glob("*/*.tmp"))


async def test_disk_cache_detects_corrupt_and_truncated_files(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, max_bytes=10**6)
    for n in (1, 2):
        await disk.put(key(n), entry(500))
    corrupt = disk.path_of(key(1))
    blob = bytearray(corrupt.read_bytes())
    blob[-10] ^= 0xFF
    corrupt.write_bytes(bytes(blob))
    truncated = disk.path_of(key(2))
    truncated.write_bytes(truncated.read_bytes()[:100])
    assert await disk.get(key(1)) is None and not corrupt.exists()
    assert await disk.get(key(2)) is None and not truncated.exists()


async def test_disk_cache_is_bounded_and_evicts_least_recently_used(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, max_bytes=5 * 1200)
    for n in range(5):
        await disk.put(key(n), entry(1000))
        os.utime(disk.path_of(key(n)), (1000 + n, 1000 + n))
    assert await disk.get(key(0)) is not None
    await disk.put(key(5), entry(1000))
    assert disk.bytes <= disk.max_bytes
    assert await disk.get(key(1)) is None, "the oldest untouched file is evicted"
    assert await disk.get(key(0)) is not None, "a file read recently is kept"
    assert await disk.get(key(5)) is not None


def test_disk_cache_only_accepts_content_addressed_names(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, max_bytes=10**6)
    for bad in ("../../etc/passwd", "A" * 64, key(1)[:63]):
        try:
            disk.path_of(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")


async def test_unusable_cache_directory_degrades_without_failing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    disk = DiskCache(blocker / "cache", max_bytes=10**6)
    assert not disk.writable
    await disk.put(key(1), entry(100))
    assert await disk.get(key(1)) is None


def test_full_disk_degrades_to_memory_and_redis(tmp_path: Path) -> None:
    """A real write failure from the OS (file-size limit, as on a full disk) turns L3 off with a warning."""
    script = textwrap.dedent(
        f"""
        import asyncio, logging, resource, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from ttsq.store.cache import CachedAudio, DiskCache
        logging.basicConfig(level=logging.WARNING)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        disk = DiskCache(Path({str(tmp_path)!r}), max_bytes=10**9)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        asyncio.run(disk.put("{key(1)}", CachedAudio(b"x" * 100_000, "audio/wav", 1.0)))
        print("writable", disk.writable)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "writable False" in result.stdout
    assert "unusable" in result.stderr
    assert not list(tmp_path.glob("*/*.tmp")), "a failed write leaves no temp file behind"


def cache_config(**overrides: Any) -> CacheConfig:
    """The cache's config from settings; L3 is off unless a test gives it a directory."""
    return settings(**{"cache_dir": "", **overrides}).cache_config()


async def test_reads_fall_through_the_levels_and_fill_the_faster_ones(redis: Redis, tmp_path: Path) -> None:
    config = cache_config(cache_dir=tmp_path / "l3")
    writer = ResultCache(redis, config)
    await writer.put(key(1), entry(2000, b"w"))

    fresh = ResultCache(redis, config)
    assert await fresh.get(key(1)) == entry(2000, b"w")
    assert fresh.stats.as_dict()["l2"] == {"hits": 1, "misses": 0}
    assert await fresh.get(key(1)) is not None
    assert fresh.stats.hits["l1"] == 1

    await redis.delete(fresh.l2_key(key(1)))
    from_disk = ResultCache(redis, config)
    assert await from_disk.get(key(1)) == entry(2000, b"w")
    assert from_disk.stats.hits["l3"] == 1 and from_disk.stats.misses["l2"] == 1
    assert await redis.exists(fresh.l2_key(key(1))), "an L3 hit refills L2"
    assert 0 < await redis.ttl(fresh.l2_key(key(1))) <= config.l2_ttl_s

    assert await from_disk.get(key(2)) is None
    assert from_disk.stats.misses["l3"] == 1


async def test_oversized_entries_skip_redis(redis: Redis) -> None:
    cache = ResultCache(redis, cache_config(cache_l2_max_entry_bytes=4096))
    await cache.put(key(1), entry(10_000))
    assert not await redis.exists(cache.l2_key(key(1)))
    assert await cache.get(key(1)) is not None, "still served from memory"


async def test_a_disabled_cache_never_answers(redis: Redis) -> None:
    cache = ResultCache(redis, cache_config(cache_enabled=False))
    await cache.put(key(1), entry(100))
    assert await cache.get(key(1)) is None


async def test_redis_outage_makes_l2_miss_instead_of_failing(tmp_path: Path) -> None:
    dead = create_redis(dataclasses.replace(settings(redis_url=f"redis://127.0.0.1:{free_port()}/0").redis_config(), retries=0))
    cache = ResultCache(dead, cache_config(cache_dir=tmp_path))
    await cache.put(key(1), entry(100))
    fresh = ResultCache(dead, cache_config(cache_dir=tmp_path))
    assert await fresh.get(key(1)) == entry(100), "served from disk while Redis is down"
    await dead.aclose()
