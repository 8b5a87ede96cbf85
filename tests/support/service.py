"""A real ttsq deployment for end-to-end tests: redis-server, ``uvicorn app:app``, ``python worker.py``.

Every process runs as it would in production, from the repository root, configured only through
its environment and started by :mod:`ttsq.runtime.launch` (as ``make up`` starts them); logs are
kept per process so a failing test can show them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.redis_server import RedisServer, start_redis_server
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until, wait_until_ok, worker_command

ROOT = Path(__file__).resolve().parents[2]


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait for a condition of the deployment (a status, a probe); fails the test on timeout."""
    try:
        wait_until(check, timeout_s, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


@dataclass
class Service:
    """The processes of one ttsq deployment, with their logs kept for a failing test's report."""

    redis: RedisServer
    tmp: Path
    env: dict[str, str]
    api_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """Each process by the name it was started with (the latest one of a name)."""

    def spawn(self, name: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        process = spawn(args, cwd=ROOT, env={**self.env, **env}, log=self.tmp / f"{name}.log")
        self.processes.append(process)
        self.named[name] = process
        return process

    def start_api(self, name: str = "api", host: str = "127.0.0.1", **env: str) -> str:
        """An API process on this deployment's Redis (another replica when called again); returns its URL
        (on loopback, whatever ``host`` it listens on)."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = self.spawn(name, api_command(port, host=host), **env)
        wait_until_ok(f"{url}/readyz", 60, [process])
        if not self.api_url:
            self.api_url = url
        return url

    def start_worker(self, name: str, **env: str) -> Worker:
        return self.start_workers([name], **env)[0]

    def start_workers(self, names: list[str], **env: str) -> list[Worker]:
        """Workers with the same settings, started together and then waited for: their start-ups (seconds of CPU
        each, importing torch and loading the model) overlap instead of following one another."""
        workers = []
        for name in names:
            port = free_port()
            process = self.spawn(name, worker_command(), WORKER_ID=name, WORKER_HEALTH_PORT=str(port), **env)
            workers.append(Worker(name, process, f"http://127.0.0.1:{port}"))
        for worker in workers:
            wait_for(worker.ready, 180, f"worker {worker.name} to be ready")
        return workers

    def submit(self, **body: Any) -> str:
        response = httpx.post(f"{self.api_url}/v1/tts/submit", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["task_id"])

    def status(self, task_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.api_url}/v1/tts/tasks/{task_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_status(self, task_id: str, wanted: set[str], timeout_s: float = 90) -> dict[str, Any]:
        wait_for(lambda: self.status(task_id)["status"] in wanted, timeout_s, f"task {task_id} to be {wanted}")
        return self.status(task_id)

    def log(self, name: str) -> bytes:
        """The whole log of one process so far (``name`` as it was started with)."""
        path = self.tmp / f"{name}.log"
        return path.read_bytes() if path.exists() else b""

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.tmp.glob("*.log"))

    def create_key(self, name: str, scopes: str) -> str:
        """A key from the operator's command (``python -m ttsq keys create``, which talks to Redis directly, as on a
        server), run against this deployment's Redis; the key is the first line of its output."""
        result = subprocess.run(
            [sys.executable, "-m", "ttsq", "keys", "create", "--name", name, "--scopes", scopes],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"`python -m ttsq keys create` failed ({result.returncode}): {result.stderr}"
        key = result.stdout.splitlines()[0].strip() if result.stdout.strip() else ""
        assert key and " " not in key, f"no key on the first line of stdout: {result.stdout!r}"
        return key

    def kill_all(self) -> None:
        """SIGKILL every process this deployment started (each in its own process group), and reap it."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    url: str

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=2.0)

    def ready(self) -> bool:
        return self.get("/readyz").status_code == 200


@pytest.fixture
def service(tmp_path: Path, tiny_checkpoint_dir: Path) -> Iterator[Service]:
    redis = start_redis_server(tmp_path / "redis")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_"))}
    env.update(
        REDIS_URL=redis.url,
        MODEL="tiny",
        CACHE_DIR=str(tmp_path / "cache"),
        TINY_CHECKPOINT_DIR=str(tiny_checkpoint_dir),
        DEVICE="cpu",
        MAX_NEW_TOKEN="48",
        MIN_NEW_TOKEN="48",
        MAX_CHUNK_CHARS="40",
        # Loading WeTextProcessing's grammars is ~1.5 s of CPU per worker start (a quarter of it), and these
        # texts need no numbers read aloud; a test that does turns it on for its worker.
        NORMALIZE_TEXT="false",
        LEASE_S="3",
        REDIS_SOCKET_TIMEOUT_S="1.5",
        HEARTBEAT_INTERVAL_S="0.5",
        HEARTBEAT_TTL_S="3",
        SWEEP_INTERVAL_S="0.5",
        BLOCK_S="0.5",
        LISTEN_BLOCK_S="0.5",
        LISTEN_OUTAGE_S="1",
        # The API starts before any worker, and tests follow queued tasks with none on purpose: the no-worker refusal
        # is off unless a test's own API sets it (tests/e2e/test_no_worker.py).
        NO_WORKER_S="0",
        PYTHONUNBUFFERED="1",
    )
    svc = Service(redis=redis, tmp=tmp_path, env=env)
    svc.start_api()
    yield svc
    svc.kill_all()
    redis.stop()
