"""One clock for every deadline and token bucket: Redis's own, so that no host's clock matters.

Leases, retry backoffs, heartbeats, the sweep's judgements and the rate limiter's buckets all compare
times written by different machines (API replicas, workers). Host clocks drift; two seconds of skew
between two API replicas once let a 1/s, burst-5 limit pass 40 of 40 requests. So every script that
keeps time reads ``TIME`` itself (``lua/clock.lua``, put in front of it), and the few places that need
"now" in Python ask Redis (:meth:`RedisClock.now`). No host's clock decides a lease or a bucket.

Tests may *pin* the clock (a :class:`FakeClock`-like callable): the scripts then take the pinned time
from their clock argument instead of ``TIME``, so a lease lapses exactly when a test advances it. The
processes never pin it (``settings.py`` has no such knob).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from ttsq.store.connection import RedisClient

Clock = Callable[[], float]
"""Unix seconds, set by a test."""


def clock_lua() -> str:
    """``lua/clock.lua``: the functions ``clock(pinned)`` and ``deadline(at)`` that time-keeping scripts start with."""
    return files("ttsq.store").joinpath("lua", "clock.lua").read_text()


class RedisClock:
    """Redis's ``TIME``, or a test's pinned clock.

    ``key`` says whose clock: on a Redis Cluster each master keeps its own, and the scripts read the one of the
    master serving their slot, so "now" in Python is asked of the master serving ``key`` (a key of the same hash
    tag as the deadlines it is compared with), through a one-line script routed by that key.
    """

    def __init__(self, redis: RedisClient, pinned: Clock | None = None, key: str = "ttsq-clock") -> None:
        self.redis = redis
        self.pinned = pinned
        self.key = key
        self._now = redis.register_script(clock_lua() + "\nreturn tostring(clock(''))")

    def arg(self) -> str:
        """What a script's clock argument carries: '' (Redis decides) or the pinned time."""
        return "" if self.pinned is None else repr(self.pinned())

    async def now(self) -> float:
        """Unix seconds by Redis's clock (one ``TIME`` round trip), or the pinned time."""
        if self.pinned is not None:
            return self.pinned()
        reply = await self._now(keys=[self.key])
        return float(reply.decode() if isinstance(reply, bytes) else reply)
