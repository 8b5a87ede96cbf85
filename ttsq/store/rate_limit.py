"""A token bucket per caller in Redis, shared by every API replica.

A submit that queues a job pays inside the enqueue script itself (:meth:`RateLimiter.charge` gives
the queue what it needs), so paying costs no round trip of its own; one that does not queue (a cache
hit) pays with :meth:`RateLimiter.take`. Both run ``lua/token_bucket.lua`` by Redis's clock
(:mod:`ttsq.store.clock`): replicas on hosts whose clocks disagree share one bucket that refills at one rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

from redis.commands.core import AsyncScript

from ttsq.store.clock import Clock, RedisClock, clock_lua
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys
from ttsq.store.replies import TokenTaken


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


class RateLimitExceeded(Exception):
    """The caller's bucket is empty; nothing was recorded or queued. Its message is the client's answer (a 429)."""

    def __init__(self, decision: RateDecision) -> None:
        super().__init__(f"too many requests: {decision.limit} may burst, then {decision.rate_per_s:g} per second; retry shortly")
        self.decision = decision


@dataclass(frozen=True)
class Charge:
    """One submit's payment, made by the script that queues the job: the bucket and its arguments."""

    key: str
    clock: str
    """The scripts' clock argument: '' (Redis's ``TIME``: the bucket never depends on a replica's clock), or a
    test's pinned time."""
    rate_per_s: float
    burst: int

    def decision(self, taken: TokenTaken) -> RateDecision:
        """What the script said about this bucket, as the caller is told it."""
        return RateDecision(taken.allowed, self.burst, taken.tokens_left, taken.wait_s, taken.full_s, self.rate_per_s)


def token_bucket_lua() -> str:
    """The Lua function ``take_token`` that every charging script starts with (after ``clock.lua``)."""
    return files("ttsq.store").joinpath("lua", "token_bucket.lua").read_text()


def charge_script(redis: RedisClient) -> AsyncScript:
    """``lua/rate_limit.lua`` (after ``clock.lua`` and ``token_bucket.lua``): one token taken on its own."""
    lua = "\n".join([clock_lua(), token_bucket_lua(), files("ttsq.store").joinpath("lua", "rate_limit.lua").read_text()])
    return redis.register_script(lua)


class RateLimiter:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up, per subject (an API key or a client address)."""

    def __init__(self, redis: RedisClient, keys: Keys, rate_per_s: float, burst: int, clock: Clock | None = None) -> None:
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = RedisClock(redis, clock, keys.stats)
        self._script = charge_script(redis)

    def charge(self, subject: str) -> Charge:
        """What the enqueue script needs to take ``subject``'s token in the same step."""
        return Charge(self.keys.rate_limit(subject), self.clock.arg(), self.rate_per_s, self.burst)

    async def take(self, subject: str, cost: int = 1) -> RateDecision:
        """Take ``cost`` tokens now, on their own (a submit that queues nothing; work paid before it is done), all or
        none; a cost over the bucket's size is taken as the whole bucket (else it could never be paid)."""
        charge = self.charge(subject)
        cost = max(1, min(cost, charge.burst))
        reply = await self._script(keys=[charge.key], args=[charge.clock, charge.rate_per_s, charge.burst, cost])
        return charge.decision(TokenTaken.parse(reply))
