"""A token bucket per caller in Redis, shared by every API replica (one Lua script per decision)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files

from redis.asyncio import Redis

from ttsq.store.keys import Keys


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    """The bucket's size (the burst)."""
    remaining: int
    retry_after_s: int
    """Seconds until a token is back (0 when allowed)."""
    reset_s: int
    """Seconds until the bucket is full again."""
    rate_per_s: float

    def headers(self) -> dict[str, str]:
        """``RateLimit-*`` (IETF draft) headers, plus ``Retry-After`` when refused."""
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_s),
        }
        if not self.allowed:
            headers["Retry-After"] = str(max(1, self.retry_after_s))
        return headers


class RateLimiter:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up, per subject (an API key or a client address)."""

    def __init__(self, redis: Redis, keys: Keys, rate_per_s: float, burst: int, clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self._script = redis.register_script(files("ttsq.store").joinpath("lua", "rate_limit.lua").read_text())

    async def take(self, subject: str) -> RateDecision:
        allowed, remaining, retry_after, reset = await self._script(
            keys=[self.keys.rate_limit(subject)], args=[self.clock(), self.rate_per_s, self.burst]
        )
        return RateDecision(bool(allowed), self.burst, int(remaining), int(retry_after), int(reset), self.rate_per_s)
