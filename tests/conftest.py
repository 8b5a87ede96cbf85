"""Shared fixtures: a real redis-server per test session, clients, queues and API apps on it.

Engine fixtures (the generated tiny ChatTTS checkpoint, a loaded engine) live in
``tests/support/conftest_engine.py``; the real-process deployment in ``tests/support/service.py``. Library configs
are always built through :class:`settings.Settings`, the one place that holds their defaults.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis

from settings import Settings
from tests.support.redis_server import RedisServer, start_redis_server
from ttsq.domain.jobs import TTSParams
from ttsq.inference.engines.faults import FaultConfig
from ttsq.store.connection import create_redis
from ttsq.store.leases import Claim
from ttsq.store.listener import JobListener, ListenerConfig
from ttsq.store.queue import JobQueue, QueueConfig

pytest_plugins = ["tests.support.conftest_engine", "tests.support.service"]


SUMMARY: dict[str, list[str]] = {}
"""Lines repeated in the terminal summary, by section (the chaos figures): pytest captures a passing test's output,
so without this the figures of a green run would never be seen. Under pytest-xdist each test process hands its
lines to the controller, which prints them (the hooks below)."""


SLOWEST_FILES = (
    "tests/chaos/test_chaos.py",
    "tests/fuzz/test_fuzz_api.py",
    "tests/e2e/test_processes.py",
    "tests/integration/bench/test_bench_gpu.py",
    "tests/web/test_page.py",
    "tests/integration/client/test_client.py",
    "tests/e2e/test_realtime.py",
    "tests/e2e/test_make_up.py",
    "tests/e2e/test_agent_clients.py",
    "tests/e2e/test_openai.py",
    "tests/e2e/test_security_processes.py",
)
"""The files that take longest, longest first, from ``pytest --durations=80`` (2026-12-04: 60–400 s each on two busy
cores). ``make test`` hands whole files to its two processes in collection order (``--no-loadscope-reorder``: without
it pytest-xdist hands out the files with the most tests first, whatever this order says); started last, one of these
kept one process busy for minutes after the other ran out of files. Run first, the short files fill in around them."""

FAST_LAST = ("tests/unit/", "tests/project/")
"""The unit tests (``make unit``: no process started, each file seconds): collected after every other file, so the
files that start real processes (tests/web's browser and service, tests/cluster's Redis Cluster) are not left for
last, and the end of the run is many short files that the two processes share out evenly."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collect :data:`SLOWEST_FILES` first and :data:`FAST_LAST` last (a stable sort: each file's own order is kept)."""
    rank = {name: position for position, name in enumerate(SLOWEST_FILES)}

    def first(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank) + (1 if path.startswith(FAST_LAST) else 0))

    items.sort(key=first)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist test process
        workeroutput["summary"] = SUMMARY


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, in the controller: a test process has finished; keep its summary lines."""
    for section, lines in getattr(node, "workeroutput", {}).get("summary", {}).items():
        SUMMARY.setdefault(section, []).extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for section, lines in SUMMARY.items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)


def settings(**overrides: Any) -> Settings:
    """Settings from ``overrides`` and the defaults, never from a ``.env`` file."""
    return Settings(_env_file=None, **overrides)


def queue_config(**overrides: Any) -> QueueConfig:
    return settings(**overrides).queue_config()


def fault_config(mode: str, match: str = "", **overrides: Any) -> FaultConfig:
    """Fault injection as the ``FAULT_*`` test settings configure it."""
    return settings(fault_mode=mode, fault_match=match, **{f"fault_{k}": v for k, v in overrides.items()}).fault_config()


def task_id() -> str:
    """A fresh job id (the queue takes any unique string; the API signs uuid4s)."""
    return str(uuid.uuid4())


def params(text: str = "hello", **overrides: Any) -> TTSParams:
    return TTSParams(text=text, speaker_seed=7, seed=7, **overrides)


async def claimed(queue: JobQueue, worker: str = "w") -> Claim:
    """Claim the next job for ``worker`` (there must be one): its claim carries the fencing token the
    queue wants back with the job's renewals, completion or failure."""
    claim = await queue.leases.claim(worker, block_s=0.1)
    assert claim is not None, "there was no job to claim"
    return claim


@dataclass
class FakeClock:
    """The queue's clock, set by the test: leases lapse and backoffs end when the test says so."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client on a freshly flushed database; every test starts from an empty Redis."""
    client = create_redis(settings(redis_url=redis_server.url).redis_config())
    assert isinstance(client, Redis)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(redis: Redis, clock: FakeClock) -> Any:
    """Factory: a JobQueue on the test Redis, with settings overrides, on the test's clock."""

    def build(**overrides: Any) -> JobQueue:
        return JobQueue(redis, queue_config(**overrides), clock=clock)

    return build


@pytest.fixture
def make_settings(redis_server: RedisServer, tmp_path: Path) -> Any:
    def build(**overrides: Any) -> Settings:
        # An in-process app runs with no worker, and its tests hold streams and long-polls on queued jobs on purpose: the
        # no-worker refusal (NO_WORKER_S) is off unless a test sets it (tests/integration/api/test_no_worker.py).
        values: dict[str, Any] = {
            "redis_url": redis_server.url,
            "model": "tiny",
            "cache_dir": tmp_path / "cache",
            "no_worker_s": 0,
        }
        values.update(overrides)
        return settings(**values)

    return build


@asynccontextmanager
async def listening(
    queue: JobQueue, block_s: float = 1.0, on_outage: Callable[[], None] = lambda: None
) -> AsyncIterator[JobListener]:
    """A running stream listener on ``queue``'s connection and shards (as the API's lifespan runs one)."""
    config = ListenerConfig(block_s=block_s, retry_s=0.05, outage_s=60.0)
    listener = JobListener(queue.redis, queue.shards, config, on_outage=on_outage)
    stop = asyncio.Event()
    running = asyncio.create_task(listener.run(stop))
    try:
        yield listener
    finally:
        stop.set()
        await running


@asynccontextmanager
async def api_client(config: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The real app (lifespan included) behind an in-process ASGI transport."""
    from app import create_app

    app = create_app(config)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ttsq.test") as client:
            yield client, app


@pytest.fixture
async def client(redis: Redis, make_settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(make_settings()) as (http, _app):
        yield http
