"""ttsq's real processes against a Redis Cluster (or any REDIS_URL): API replicas and workers, as in production.

:meth:`Processes.worker` runs ``worker.main`` on a benchmark stand-in engine (``python -m bench.fixed_worker``):
the real claim loop, leases, heartbeats, probes and shutdown, with no model to load, so a test can start several
in seconds and what it measures is the queue. ``BENCH_ENGINE=noop`` answers at once; ``fixed`` spends
``FIXED_COST_CALL_MS`` per call. :meth:`Processes.model_workers` is ``python worker.py`` itself, on the tiny
random-weight ChatTTS checkpoint, as the chaos suite runs it (:data:`tests.chaos.harness.ENGINE_ENV`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.chaos.harness import ENGINE_ENV, OPEN_LIMITS_ENV, TIMING_ENV
from tests.support.service import ROOT, wait_for
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command

QUICK = {
    **TIMING_ENV,
    **OPEN_LIMITS_ENV,
    "RESULT_TTL_S": "3600",
    "MODEL": "tiny",
    "PYTHONUNBUFFERED": "1",
    "LOG_FORMAT": "text",
}
"""Short leases and sweeps (a lost worker's jobs come back within seconds), open fair-use limits (one test client
submits everything), and ``MODEL=tiny`` so the API says what it is; the workers' engine is a stand-in anyway."""


@dataclass
class StandIn:
    name: str
    process: subprocess.Popen[bytes]
    url: str

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=2.0)


@dataclass
class Processes:
    """The processes of one deployment on ``redis_url``, with their logs under ``tmp``."""

    tmp: Path
    redis_url: str
    env: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_", "BENCH_"))}
        return {**base, **QUICK, "REDIS_URL": self.redis_url, "CACHE_DIR": str(self.tmp / "cache"), **self.env, **extra}

    def api(self, name: str, **env: str) -> str:
        port = free_port()
        process = spawn(api_command(port), cwd=ROOT, env=self._env(env), log=self.tmp / f"{name}.log")
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_until_ok(f"{url}/readyz", 60, [process])
        return url

    def worker(self, name: str, *, ready: bool = True, **env: str) -> StandIn:
        """A stand-in worker (``BENCH_ENGINE`` noop unless given); waits for its readiness unless ``ready`` is False."""
        port = free_port()
        settings = {"WORKER_ID": name, "WORKER_HEALTH_PORT": str(port), "BENCH_ENGINE": "noop", **env}
        command = [sys.executable, "-m", "bench.fixed_worker"]
        process = spawn(command, cwd=ROOT, env=self._env(settings), log=self.tmp / f"{name}.log")
        self.processes.append(process)
        worker = StandIn(name, process, f"http://127.0.0.1:{port}")
        wait_for(lambda: worker.get("/healthz").status_code == 200, 120, f"worker {name} to be live")
        if ready:
            wait_for(lambda: worker.get("/readyz").status_code == 200, 120, f"worker {name} to be ready")
        return worker

    def model_workers(self, names: list[str], checkpoint: Path, **env: str) -> list[StandIn]:
        """``python worker.py`` on the tiny ChatTTS checkpoint, one per name, started together (their start-ups,
        seconds of CPU each, overlap) and then waited for until ready."""
        workers = []
        for name in names:
            port = free_port()
            settings = {**ENGINE_ENV, "TINY_CHECKPOINT_DIR": str(checkpoint), "WORKER_ID": name, "WORKER_HEALTH_PORT": str(port)}
            process = spawn(worker_command(), cwd=ROOT, env=self._env({**settings, **env}), log=self.tmp / f"{name}.log")
            self.processes.append(process)
            workers.append(StandIn(name, process, f"http://127.0.0.1:{port}"))
        for worker in workers:
            wait_until_ok(f"{worker.url}/readyz", 180, [worker.process])
        return workers

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        if process.poll() is None:
            os.killpg(process.pid, sig)
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait()

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def submit(http: httpx.Client, api: str, text: str, seed: int, **body: Any) -> str:
    response = http.post(f"{api}/v1/tts/submit", json={"text": text, "seed": seed, **body})
    assert response.status_code in (200, 202), response.text
    return str(response.json()["task_id"])
