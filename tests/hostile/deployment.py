"""The API the hostile suite attacks, launched exactly as shipped (:func:`ttsq.runtime.launch.api_command`, the image's
``CMD``) under the open-file limit the image check runs it with (``--ulimit nofile=1024:1024``), on a real
redis-server, with keys required (``AUTH=on``); and the witness (:mod:`tests.hostile.probe`) sampling it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.redis_server import start_redis_server
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok

ROOT = Path(__file__).resolve().parents[2]
OPEN_FILES = 1024
"""The API's open-file limit: the image check's (``podman run --ulimit nofile=1024:1024``)."""


@dataclass
class Api:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    log: Path
    command: list[str]
    """What was run: ``prlimit`` and the launch command."""

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/tts/realtime"

    def create_key(self, scopes: str = "tts") -> str:
        """A key made the operator's way (``python -m ttsq keys create``) on this deployment's Redis."""
        result = subprocess.run(
            [sys.executable, "-m", "ttsq", "keys", "create", "--name", "hostile", "--scopes", scopes],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout.splitlines()[0].strip()


def start_api(redis_url: str, tmp: Path, **settings: str) -> Api:
    """The API as shipped, keys required, its open files limited to :data:`OPEN_FILES` (``prlimit``)."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_"))}
    env.update(REDIS_URL=redis_url, AUTH="on", MODEL="tiny", CACHE_DIR=str(tmp / "cache"), PYTHONUNBUFFERED="1", **settings)
    log = tmp / f"api-{port}.log"
    command = ["prlimit", f"--nofile={OPEN_FILES}:{OPEN_FILES}", "--", *api_command(port, host="127.0.0.1")]
    process = spawn(command, cwd=ROOT, env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    wait_until_ok(f"{url}/readyz", 60, [process])
    return Api(url, port, process, env, log, command)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def deployment(tmp: Path, **settings: str) -> Iterator[Api]:
    """A redis-server and the API on it, both stopped at the end."""
    redis = start_redis_server(tmp / "redis")
    try:
        api = start_api(redis.url, tmp, **settings)
        try:
            yield api
        finally:
            stop(api.process)
    finally:
        redis.stop()


@contextmanager
def witnessed(api: Api, samples: Path, interval_s: float = 0.1) -> Iterator[Path]:
    """:mod:`tests.hostile.probe` sampling ``api`` into ``samples`` for as long as the block runs."""
    probe = spawn(
        [sys.executable, "-m", "tests.hostile.probe", "--url", api.url, "--pid", str(api.process.pid), "--out", str(samples),
         "--interval-s", str(interval_s)],
        cwd=ROOT,
        env=api.env,
    )  # fmt: skip
    try:
        yield samples
    finally:
        probe.send_signal(signal.SIGTERM)
        probe.wait(30)


def read_samples(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
