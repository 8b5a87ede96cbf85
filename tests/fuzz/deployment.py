"""A real deployment to fuzz: redis-server, ``uvicorn app:app`` and one ``python worker.py`` on the tiny checkpoint.

Started the way :mod:`tests.support.service` starts the end-to-end tests' processes. The worker is real
because the API's answers depend on it: an audio stream or an OpenAI speech request lasts until its
job is synthesised. Its settings keep every job small (short texts, few audio tokens), so the queue
the fuzzer fills drains quickly on two cores. Two API replicas share the Redis and the worker: one
takes callers without a key (``AUTH=auto`` on loopback, as ``make up`` runs), the other requires keys
(``AUTH=on``) and is fuzzed with an ``admin`` key created the way an operator creates one,
``python -m ttsq keys create``. A few dead letters are made before the worker starts, so that the
admin routes for one dead letter (show, requeue, drop) are reached with ids that exist, not only 404s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from settings import Settings
from tests.support.redis_server import start_redis_server
from tests.support.service import Service
from ttsq.domain.jobs import TTSParams
from ttsq.store.connection import create_redis
from ttsq.store.queue import JobQueue
from ttsq.store.task_ids import SharedTaskIdSecret, TaskIdSigner

FUZZ_SETTINGS = {
    "MODEL": "tiny",
    "DEVICE": "cpu",
    "MAX_TEXT_CHARS": "40",  # one sentence chunk per job; the schema's maxLength follows it
    "MAX_CHUNK_CHARS": "40",
    "MAX_NEW_TOKEN": "8",
    "MIN_NEW_TOKEN": "8",
    "REFINE_MAX_NEW_TOKEN": "8",
    # The fuzzer submits far faster than a person: the rate limit is tested elsewhere (tests/integration/api/test_security.py),
    # and here it would only hide the task routes behind 429s.
    "RATE_LIMIT_PER_S": "100000",
    "RATE_LIMIT_BURST": "100000",
    # Bodies declared and never finished (hostile.unsent_bodies) are answered 408 after this, not after a minute.
    "BODY_READ_TIMEOUT_S": "2",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class Target:
    """One API to fuzz: its URL, and the key to send (None: it takes callers without one)."""

    url: str
    key: str | None
    name: str
    process: str
    """The API process's name in the deployment (its log)."""


@dataclass
class Deployment:
    service: Service
    open: Target
    """``AUTH=auto`` on loopback: keys are optional."""
    keyed: Target
    """``AUTH=on``, fuzzed with an ``admin`` key as a bearer header, so every authenticated path is reached."""

    def logs(self) -> str:
        return self.service.logs()


DEAD_LETTERS = 30
"""How many dead letters the admin routes find at the start: enough that the fuzzer's requeues and drops on the first
replica do not use them all up (each requeued one is a short job for the worker)."""


async def _make_dead_letters(redis_url: str, count: int) -> list[str]:
    """Jobs failed for good, as a worker fails one (claimed, then a permanent error), under ids the API issued
    (signed with the replicas' shared secret). Runs before the worker starts, so no worker claims them."""
    config = Settings(_env_file=None, redis_url=redis_url)
    redis = create_redis(config.redis_config())
    try:
        queue = JobQueue(redis, config.queue_config())
        signer = TaskIdSigner(await SharedTaskIdSecret(redis, queue.keys).fetch())
        made = []
        for index in range(count):
            job_id = signer.new()
            await queue.enqueue(job_id, TTSParams(text=f"dead letter {index}", speaker_seed=7, seed=7), single_flight=False)
            claim = await queue.leases.claim("fuzz-setup", block_s=1)
            assert claim is not None and claim.job.id == job_id, "the queue was not empty before the worker started"
            await queue.leases.fail(claim.job, "made by the fuzzing set-up", retryable=False, cache_key=None)
            made.append(job_id)
        return made
    finally:
        await redis.aclose()


@contextmanager
def deployment(tmp: Path, checkpoint_dir: Path) -> Iterator[Deployment]:
    """Redis, one worker and two API replicas on them: keys optional, and keys required."""
    redis = start_redis_server(tmp / "redis")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_", "AUTH"))}
    env.update(FUZZ_SETTINGS, REDIS_URL=redis.url, CACHE_DIR=str(tmp / "cache"), TINY_CHECKPOINT_DIR=str(checkpoint_dir))
    service = Service(redis=redis, tmp=tmp, env=env)
    try:
        key = service.create_key("fuzz", "admin")
        open_url = service.start_api("api-open", AUTH="auto")
        keyed_url = service.start_api("api-keyed", AUTH="on")
        asyncio.run(_make_dead_letters(redis.url, DEAD_LETTERS))
        service.start_worker("worker")
        open_target = Target(open_url, None, "keys optional", "api-open")
        yield Deployment(service, open_target, Target(keyed_url, key, "AUTH=on, admin key", "api-keyed"))
    finally:
        service.kill_all()
        redis.stop()
