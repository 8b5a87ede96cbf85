"""Shared fixtures: a real redis-server per test session, clients, queues and API apps on it.

Engine fixtures (the generated tiny ChatTTS checkpoint, a loaded engine) live in
``tests/conftest_engine.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from settings import Settings
from tests.redis_server import RedisServer, start_redis_server
from ttsq.queue import JobQueue, QueueConfig
from ttsq.redis_conn import RedisConfig, create_redis

pytest_plugins = ["tests.conftest_engine", "tests.service"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client on a freshly flushed database; every test starts from an empty Redis."""
    client = create_redis(RedisConfig(url=redis_server.url))
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def make_queue(redis: Redis) -> Any:
    """Factory: a JobQueue on the test Redis with config overrides."""

    def build(**overrides: Any) -> JobQueue:
        return JobQueue(redis, QueueConfig(**overrides))

    return build


@pytest.fixture
def make_settings(redis_server: RedisServer, tmp_path: Path) -> Any:
    def build(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"redis_url": redis_server.url, "model": "tiny", "cache_dir": tmp_path / "cache"}
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return build


@asynccontextmanager
async def api_client(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The real app (lifespan included) behind an in-process ASGI transport."""
    from app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ttsq.test") as client:
            yield client, app


@pytest.fixture
async def client(redis: Redis, make_settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(make_settings()) as (http, _app):
        yield http
