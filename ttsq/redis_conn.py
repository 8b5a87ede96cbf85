"""Building the asyncio Redis client the same way in every process.

The socket timeout bounds every command, so a dead Redis surfaces as an error within seconds
instead of hanging a request; blocking reads stay shorter than it (validated in settings).
Retries are few and short: the API turns a Redis outage into ``503 Retry-After`` rather than
holding the client while it waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


@dataclass(frozen=True)
class RedisConfig:
    url: str
    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 2.0
    max_connections: int = 64
    retries: int = 2


def create_redis(config: RedisConfig) -> Redis:
    """A client with bytes replies (audio is binary), bounded timeouts and two quick retries."""
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
