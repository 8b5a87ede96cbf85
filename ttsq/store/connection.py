"""Connecting to Redis the same way in every process, and checking that it will not lose jobs.

The socket timeout bounds every command, so a dead Redis surfaces as an error within seconds
instead of hanging a request; blocking reads stay shorter than it (validated in settings).
Retries are few and short: the API turns a Redis outage into ``503 Retry-After`` rather than
holding the client while it waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError


@dataclass(frozen=True)
class RedisConfig:
    """How every process connects. Built from settings by ``settings.py`` (``REDIS_*``)."""

    url: str
    socket_timeout_s: float
    connect_timeout_s: float
    max_connections: int
    retries: int
    """Quick retries of a command after a connection error or a timeout, before the error surfaces."""


def create_redis(config: RedisConfig) -> Redis:
    """A client with bytes replies (audio is binary), bounded timeouts and a few quick retries."""
    return Redis.from_url(
        config.url,
        decode_responses=False,
        socket_timeout=config.socket_timeout_s,
        socket_connect_timeout=config.connect_timeout_s,
        max_connections=config.max_connections,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), config.retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        health_check_interval=30,
    )


class EvictionRisk(StrEnum):
    NONE = "none"
    """``maxmemory-policy`` is ``noeviction``: Redis refuses writes rather than dropping keys."""
    EVICTS = "evicts"
    """Another policy: under memory pressure Redis may delete queued jobs and results."""
    UNKNOWN = "unknown"
    """The policy could not be read (managed Redis services often forbid CONFIG)."""
    UNREACHABLE = "unreachable"
    """Redis did not answer at all."""


@dataclass(frozen=True)
class EvictionCheck:
    risk: EvictionRisk
    message: str | None
    """What to tell the operator; None when there is nothing to say."""


async def check_eviction_policy(redis: Redis) -> EvictionCheck:
    """Read ``maxmemory-policy`` once at start-up; the caller decides whether to refuse to run."""
    try:
        reply = await redis.config_get("maxmemory-policy")
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        return EvictionCheck(EvictionRisk.UNREACHABLE, f"cannot reach Redis at start-up ({exc}); will keep retrying")
    except RedisError as exc:
        return EvictionCheck(EvictionRisk.UNKNOWN, f"cannot read Redis maxmemory-policy ({exc}); make sure it is 'noeviction'")
    values = list(reply.values()) if reply else []
    policy = values[0].decode() if values and isinstance(values[0], bytes) else str(values[0]) if values else "unknown"
    if policy == "noeviction":
        return EvictionCheck(EvictionRisk.NONE, None)
    return EvictionCheck(
        EvictionRisk.EVICTS,
        f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may EVICT queued jobs "
        "and results, and accepted tasks would silently disappear. Set it to 'noeviction' "
        "(and put the result cache on its own Redis).",
    )


class UnsafeRedisError(RuntimeError):
    """Redis may evict job keys and the operator asked to refuse to run in that case."""


def enforce_eviction_policy(check: EvictionCheck, *, require_noeviction: bool) -> None:
    """Refuse to start when Redis may evict and ``require_noeviction`` is set; the caller logs the message."""
    if require_noeviction and check.risk is EvictionRisk.EVICTS:
        raise UnsafeRedisError(check.message)


async def verify_redis(redis: Redis, *, require_noeviction: bool, warn: Callable[[str], object]) -> EvictionCheck:
    """The start-up check both processes run: report any risk through ``warn``, refuse to run if required."""
    check = await check_eviction_policy(redis)
    if check.message is not None:
        warn(check.message)
    enforce_eviction_policy(check, require_noeviction=require_noeviction)
    return check
