"""Where a benchmark runs from and the processes it starts: one place for the repository root, the results folder,
the benchmarked services' environment and starting and stopping redis/API/worker stacks.

Why one place: every benchmark and the soak start the same kinds of process (``uvicorn app:app``, ``python worker.py``
or a stand-in worker, a ``redis-server``) and must stop all of them whatever happens, or a failed run leaves servers
holding ports and CPU on a shared machine. Each once carried its own copy of "terminate all, wait, kill what lingers"
and of the settings that make a measurement about serving (cache off, fair-use limits lifted). Every benchmark
takes the root from here (:data:`bench.ROOT`): a root computed from each file's own path would change with its depth.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT
from ttsq.runtime.launch import ProcessExited, api_command, free_port, spawn, wait_until_ok

__all__ = [
    "RESULTS",
    "ROOT",
    "EngineSpec",
    "Stack",
    "api_process",
    "progress",
    "record",
    "service_env",
    "stop_processes",
    "utc_now",
]


def utc_now() -> str:
    """The date and time a report is headed with: ``2026-12-04 18:40 UTC``."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def record(path: Path, text: str, data: Mapping[str, Any] | None = None) -> Path:
    """Write a report (its numbers beside it as ``.json`` when given) and say where: what BENCHMARKS.md cites."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if data is not None:
        path.with_suffix(".json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"written to {shown}", flush=True)
    return path


def progress(message: str, prefix: str = "") -> None:
    """A timestamped line on stdout, flushed at once: a long run's log shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {prefix}{message}", flush=True)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    """SIGTERM to every one first (so they wind down together: a worker finishes its batch), then wait for each;
    SIGKILL what is still running after ``grace_s``."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@dataclass(frozen=True)
class EngineSpec:
    """An engine a benchmark or the soak runs the service on: the worker command and the environment that choose it."""

    key: str
    label: str
    """What every output calls it; a stand-in says so here."""
    env: dict[str, str]
    command: list[str]
    ready_timeout_s: float
    """How long its worker may take to load and warm the model before its ``/readyz``."""
    stand_in: bool = False
    """True for an engine that is not ChatTTS (a fixed-cost or no-op model)."""


@dataclass
class Stack:
    """Every process a run started, by name, so that all of them are stopped whatever happens; their logs in ``tmp``."""

    tmp: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = spawn(args, cwd=ROOT, env=env, log=self.tmp / f"{name}.log")
        self.processes[name] = process
        return process

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.tmp / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def wait_ready(self, name: str, url: str, timeout_s: float) -> None:
        """Wait for the readiness probe, failing at once (with the log) if the process died."""
        try:
            wait_until_ok(url, timeout_s, [self.processes[name]])
        except ProcessExited:
            raise RuntimeError(f"{name} exited with {self.processes[name].returncode}:\n{self.log_tail(name)}") from None
        except TimeoutError:
            raise RuntimeError(f"{name} was not ready at {url} within {timeout_s:.0f}s:\n{self.log_tail(name)}") from None

    def start_api(self, name: str, env: dict[str, str], timeout_s: float = 90, app: str = "app:app") -> str:
        """Start ``uvicorn`` on ``app`` and wait for its ``/readyz``; returns its base URL."""
        port = free_port()
        self.start(name, api_command(port, app=app), env)
        url = f"http://127.0.0.1:{port}"
        self.wait_ready(name, f"{url}/readyz", timeout_s)
        return url

    def start_worker(self, name: str, cmd: list[str], env: dict[str, str], timeout_s: float, worker_id: str = "") -> str:
        """Start a worker process (``WORKER_ID`` ``worker_id``, else ``name``) and wait for its ``/readyz``; returns its probe
        server's URL."""
        port = free_port()
        self.start(name, cmd, env | {"WORKER_ID": worker_id or name, "WORKER_HEALTH_PORT": str(port)})
        url = f"http://127.0.0.1:{port}"
        self.wait_ready(name, f"{url}/readyz", timeout_s)
        return url

    def stop(self, *names: str) -> None:
        """SIGTERM (workers finish their job and leave), then SIGKILL after 30 s."""
        stop_processes([self.processes.pop(name) for name in names if name in self.processes])

    def close(self) -> None:
        self.stop(*list(self.processes))


def service_env(redis_url: str, **extra: str) -> dict[str, str]:
    """Every benchmarked ttsq process's environment: cache and single-flight off, a deep queue, quiet logs."""
    return dict(
        os.environ,
        REDIS_URL=redis_url,
        CACHE_ENABLED="false",
        SINGLE_FLIGHT="false",
        CACHE_DIR="",
        CACHE_L1_MAX_BYTES="0",
        MAX_QUEUE_DEPTH="100000000",
        # Every client is one loopback address: the fair-use limits (meant for the public) would
        # throttle the load itself. They are lifted, not turned off: each submit still runs them.
        RATE_LIMIT_PER_S="1000000",
        RATE_LIMIT_BURST="1000000",
        MAX_QUEUED_PER_KEY="100000000",
        TASK_ID_SECRET="bench-throughput-secret-0123456789",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        DEVICE="cpu",
        CPU_THREADS="1",
        SHUTDOWN_GRACE_S="10",
        **extra,
    )


@contextlib.contextmanager
def api_process(env: dict[str, str], log: Path) -> Iterator[tuple[str, int]]:
    """One uvicorn API process with ``env``, once ready: its base URL and port; stopped (killed if it lingers) at the end."""
    port = free_port()
    api = spawn(api_command(port), cwd=ROOT, env=env, log=log)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_ok(f"{base}/readyz", 60, [api])
        yield base, port
    finally:
        stop_processes([api])
